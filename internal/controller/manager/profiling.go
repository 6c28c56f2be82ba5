package manager

import (
	"net/http"
	"net/http/pprof"
)

// profilingHandlers are Go's profiles (net/http/pprof) under /debug/pprof/,
// served on the metrics endpoint with --profiling (as kube components'
// --profiling serves them); none without it.
func profilingHandlers(on bool) map[string]http.Handler {
	if !on {
		return nil
	}
	return map[string]http.Handler{
		"/debug/pprof/":        http.HandlerFunc(pprof.Index),
		"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
		"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
		"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
		"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
	}
}
