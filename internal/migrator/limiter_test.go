package migrator

import (
	"testing"

	"golang.org/x/time/rate"
)

func TestChunkAtRate(t *testing.T) {
	tests := []struct {
		name    string
		chunk   int64
		limiter *rate.Limiter
		want    int64
	}{
		{"no cap", 500, nil, 500},
		{"an unlimited limiter", 500, rate.NewLimiter(rate.Inf, 1), 500},
		{"a second's writes", 500, NewLimiter(97, 0), 97},
		{"a fraction rounds up", 500, NewLimiter(97.2, 0), 98},
		{"within the chunk size", 500, NewLimiter(2000, 0), 500},
		{"a few writes a second", 500, NewLimiter(2, 0), minRateChunk},
		{"a chunk size under the floor", 5, NewLimiter(2, 0), 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := chunkAtRate(tt.chunk, tt.limiter); got != tt.want {
				t.Errorf("chunkAtRate(%d, %v) = %d, want %d", tt.chunk, tt.limiter, got, tt.want)
			}
		})
	}
}

func TestNewLimiter(t *testing.T) {
	if l := NewLimiter(0, 5); l != nil {
		t.Errorf("NewLimiter(0, 5) = %v, want none", l)
	}
	for _, tt := range []struct{ burst, want int }{{0, DefaultBurst}, {1, 1}, {20, 20}} {
		if got := NewLimiter(50, tt.burst).Burst(); got != tt.want {
			t.Errorf("NewLimiter(50, %d) has a burst of %d, want %d", tt.burst, got, tt.want)
		}
	}
}
