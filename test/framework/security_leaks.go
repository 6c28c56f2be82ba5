package framework

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
)

// NewMarker returns a unique random value to store in an object, so that a
// test can look for it wherever object contents must never appear.
func NewMarker(t testing.TB) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "svmmarker" + hex.EncodeToString(b)
}

// LeakForms are the strings that betray marker in text: the marker itself,
// and the base64 of it as found inside the base64 of any larger value
// (Secret data is base64 in JSON). A marker at any byte offset in encoded
// data shows up as one of three aligned encodings of its tail, so all
// three are returned, in the standard and the URL alphabet.
func LeakForms(marker string) []string {
	forms := []string{marker}
	for skip := range 3 {
		tail := []byte(marker[skip:])
		tail = tail[:len(tail)/3*3]
		forms = append(forms, base64.StdEncoding.EncodeToString(tail), base64.URLEncoding.EncodeToString(tail))
	}
	return forms
}

// Leak is a marker found where it must not be.
type Leak struct {
	Where, Marker, Form string
}

// FindLeaks looks for every form of every marker in text, which came from
// where (a log, an Event), and returns what it found.
func FindLeaks(where, text string, markers []string) []Leak {
	var out []Leak
	for _, m := range markers {
		for _, f := range LeakForms(m) {
			if strings.Contains(text, f) {
				out = append(out, Leak{Where: where, Marker: m, Form: f})
			}
		}
	}
	return out
}
