package controlplane

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAnEarlyExitSaysWhy(t *testing.T) {
	p := &process{
		name:    "server",
		path:    "/bin/sh",
		args:    []string{"-c", "for i in $(seq 1 500); do echo starting $i; done; echo 'bind: address already in use'; exit 1"},
		logPath: filepath.Join(t.TempDir(), "server.log"),
	}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	err := p.waitReady(context.Background(), time.Minute, func(context.Context) error { return errors.New("not yet") })
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Fatalf("error %v, want that the server exited", err)
	}
	if !strings.HasSuffix(err.Error(), "bind: address already in use\n") {
		t.Errorf("error %q does not end with the log's last line", err)
	}
	if strings.Contains(err.Error(), "starting 1\n") || len(err.Error()) > 2200 {
		t.Errorf("error carries %d bytes, want only the log's last 2 KiB", len(err.Error()))
	}
}
