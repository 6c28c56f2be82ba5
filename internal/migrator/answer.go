package migrator

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// writeAnswer is what the engine reads of a write's answer.
type writeAnswer struct {
	resourceVersion string
	// entriesRead says the answer was read as far as its managedFields;
	// hasEntries that it carries at least one entry.
	entriesRead, hasEntries bool
}

// readAnswer reads an object's metadata.resourceVersion from its JSON as
// it arrives and, when entries is set, whether its metadata.managedFields
// holds any entry; then it discards the rest of body unread.
// kube-apiserver writes an object's metadata before its content, the
// resourceVersion before annotations, and managedFields last: without
// entries little is read of an object however large its metadata, and
// with them, annotations and labels are skipped byte by byte, never held
// (a string of 256 KiB costs no more memory than a short one), and the
// entries themselves are not read past the first.
func readAnswer(body io.Reader, entries bool) (writeAnswer, error) {
	s := &scanner{r: bufio.NewReader(body)}
	var a writeAnswer
	sawMeta, sawRV := false, false
	_, err := s.object(func(key string) (bool, error) {
		if key != "metadata" {
			return false, s.skip()
		}
		sawMeta = true
		_, err := s.object(func(key string) (bool, error) {
			switch key {
			case "resourceVersion":
				rv, err := s.str(maxKept)
				a.resourceVersion, sawRV = rv, true
				return !entries || a.entriesRead, err
			case "managedFields":
				if !entries {
					return false, s.skip()
				}
				var err error
				a.hasEntries, err = s.nonEmptyArray(sawRV)
				a.entriesRead = true
				return sawRV, err
			}
			return false, s.skip()
		})
		return true, err
	})
	switch {
	case err != nil:
		return a, err
	case !sawMeta:
		return a, errors.New("the answer has no metadata")
	case !sawRV:
		return a, errors.New("the answer's metadata has no resourceVersion")
	}
	// Metadata without managedFields has no entries.
	a.entriesRead = entries
	// Drained, so that the connection serves the next request.
	_, err = io.Copy(io.Discard, s.r)
	return a, err
}

// maxKept is the longest string the scanner keeps (a key, a
// resourceVersion); longer ones are skipped and read as "".
const maxKept = 256

// scanner reads JSON byte by byte from a buffered reader, keeping only the
// short strings asked for: it walks an answer without holding its values,
// where encoding/json's Decoder holds each whole token.
type scanner struct{ r *bufio.Reader }

// peek returns the next byte that is not white space, unread.
func (s *scanner) peek() (byte, error) {
	for {
		b, err := s.r.ReadByte()
		if err != nil {
			return 0, unexpected(err)
		}
		switch b {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return b, s.r.UnreadByte()
	}
}

// expect reads the next byte that is not white space, which must be want.
func (s *scanner) expect(want byte) error {
	b, err := s.peek()
	if err != nil {
		return err
	}
	if b != want {
		return fmt.Errorf("want %q, got %q", want, b)
	}
	_, err = s.r.ReadByte()
	return err
}

// object reads an object, calling f with each key once the scanner is at
// its value, which f reads. f may stop the walk: the rest of the object is
// then left unread, and object reports it stopped.
func (s *scanner) object(f func(key string) (stop bool, err error)) (stopped bool, err error) {
	if err := s.expect('{'); err != nil {
		return false, err
	}
	if b, err := s.peek(); err != nil || b == '}' {
		if err == nil {
			_, err = s.r.ReadByte()
		}
		return false, err
	}
	for {
		key, err := s.str(maxKept)
		if err != nil {
			return false, err
		}
		if err := s.expect(':'); err != nil {
			return false, err
		}
		if stop, err := f(key); err != nil || stop {
			return stop, err
		}
		b, err := s.peek()
		if err != nil {
			return false, err
		}
		if _, err := s.r.ReadByte(); err != nil {
			return false, unexpected(err)
		}
		switch b {
		case ',':
		case '}':
			return false, nil
		default:
			return false, fmt.Errorf("want ',' or '}', got %q", b)
		}
	}
}

// str reads a string and returns it when it is at most most bytes long
// as JSON, "" otherwise. It reads up to each quote at once, and a quote
// after an odd run of backslashes is escaped.
func (s *scanner) str(most int) (string, error) {
	if err := s.expect('"'); err != nil {
		return "", err
	}
	raw := []byte{'"'}
	long := false
	backslashes := 0 // the run of backslashes the string read so far ends with
	for {
		chunk, err := s.r.ReadSlice('"')
		full := errors.Is(err, bufio.ErrBufferFull) // no quote in the buffer
		if err != nil && !full {
			return "", unexpected(err)
		}
		if long = long || len(raw)+len(chunk) > most+1; !long {
			raw = append(raw, chunk...)
		}
		body := chunk
		if !full {
			body = chunk[:len(chunk)-1]
		}
		if trailing := len(body) - len(bytes.TrimRight(body, `\`)); trailing == len(body) {
			backslashes += trailing
		} else {
			backslashes = trailing
		}
		switch {
		case full:
			continue
		case backslashes%2 == 1:
			backslashes = 0 // an escaped quote, which ends the run
			continue
		case long:
			return "", nil
		}
		var out string
		return out, json.Unmarshal(raw, &out)
	}
}

// nonEmptyArray reads an array (or null) and reports whether it holds an
// element. When stop is set, the rest of a non-empty array is left
// unread: the caller reads no further.
func (s *scanner) nonEmptyArray(stop bool) (bool, error) {
	b, err := s.peek()
	if err != nil || b != '[' {
		// null, or not an array: no entries either way.
		return false, errors.Join(err, s.skip())
	}
	if err := s.expect('['); err != nil {
		return false, err
	}
	if b, err = s.peek(); err != nil {
		return false, err
	}
	if b == ']' {
		_, err := s.r.ReadByte()
		return false, err
	}
	if stop {
		return true, nil
	}
	return true, s.skipRest(1)
}

// skip reads the next value, however deep, and keeps nothing of it.
func (s *scanner) skip() error {
	b, err := s.peek()
	if err != nil {
		return err
	}
	switch b {
	case '"':
		_, err := s.str(0)
		return err
	case '{', '[':
		if _, err := s.r.ReadByte(); err != nil {
			return unexpected(err)
		}
		return s.skipRest(1)
	}
	// A number, true, false or null: up to the next delimiter.
	for {
		b, err := s.r.ReadByte()
		if err != nil {
			return unexpected(err)
		}
		switch b {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return s.r.UnreadByte()
		}
	}
}

// skipRest reads to the end of the object or array the scanner is depth
// levels inside.
func (s *scanner) skipRest(depth int) error {
	for {
		b, err := s.r.ReadByte()
		if err != nil {
			return unexpected(err)
		}
		switch b {
		case '"':
			if err := s.r.UnreadByte(); err != nil {
				return err
			}
			if _, err := s.str(0); err != nil {
				return err
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return nil
			}
		}
	}
}

// unexpected is an answer that ended before its JSON did: a connection
// cut off, which is transient (IsTransient).
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
