package framework

import (
	"hash/fnv"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
)

// ChaosSeedEnv names the environment variable that fixes the seed of the
// chaos tests' random choices, to replay a failed run.
const ChaosSeedEnv = "SVM_CHAOS_SEED"

// ChaosSeed returns the seed of this run's random choices: $SVM_CHAOS_SEED
// when set, a fresh one otherwise. It logs the seed either way, so that any
// run, failed or not, can be replayed.
func ChaosSeed(t testing.TB) uint64 {
	t.Helper()
	if s := os.Getenv(ChaosSeedEnv); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q is not an unsigned integer: %v", ChaosSeedEnv, s, err)
		}
		t.Logf("chaos seed %d (from %s)", seed, ChaosSeedEnv)
		return seed
	}
	seed := rand.Uint64()
	t.Logf("chaos seed %d (replay this run's choices with %s=%d)", seed, ChaosSeedEnv, seed)
	return seed
}

// ChaosRand is the random source of one scenario, derived from the run's
// seed and the scenario's name: a scenario run alone (go test -run) makes
// the same choices as it did in the whole suite. The seed replays the
// choices (where and how long to break things), not the machine's timing.
func ChaosRand(seed uint64, scenario string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(scenario))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}
