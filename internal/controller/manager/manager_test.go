package manager

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestStartUntilStopped(t *testing.T) {
	errDrained := errors.New("drained")
	tests := []struct {
		name string
		// start stands for the manager: it returns on its own, drains after
		// its context ends, or (as controller-runtime's does when its caches
		// never synced) ignores the end of its context.
		start   func(context.Context) error
		stop    bool
		wantErr string
	}{
		{
			name:    "returns on its own",
			start:   func(context.Context) error { return errDrained },
			wantErr: "drained",
		},
		{
			name:    "drains after the signal",
			start:   func(ctx context.Context) error { <-ctx.Done(); return errDrained },
			stop:    true,
			wantErr: "drained",
		},
		{
			name:    "never returns after the signal",
			start:   func(context.Context) error { select {} },
			stop:    true,
			wantErr: "did not stop within 50ms",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.stop {
				cancel()
			}
			done := make(chan error, 1)
			go func() { done <- startUntilStopped(ctx, tt.start, 50*time.Millisecond) }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want one saying %q", err, tt.wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("did not return")
			}
		})
	}
}
