#!/usr/bin/env bash
# Counts what the integration tests check, so that a restructuring of the
# tests can show it weakened none: the test functions, the subtests they
# declare, and the statements that fail a test, in the suites and in the
# framework they share. A check moved from a suite into a framework helper
# counts once, where it is written; the runs of go test -json count how
# often checks are made.
set -euo pipefail
cd "$(dirname "$0")/.."

count() { grep -hoE "$1" "${@:2}" | wc -l | tr -d ' '; }

suites=(test/integration/*/*_test.go)
framework=(test/framework/*.go)
fails='\bt\.(Error|Errorf|Fatal|Fatalf)\('

echo "integration packages:           $(ls -d test/integration/*/ | wc -l | tr -d ' ')"
echo "integration test functions:     $(grep -hE '^func Test[A-Z]' "${suites[@]}" | grep -vc '^func TestMain(')"
echo "subtests declared (t.Run):      $(count 't\.Run\(' "${suites[@]}")"
echo "failing statements, suites:     $(count "$fails" "${suites[@]}")"
echo "failing statements, framework:  $(count "$fails" "${framework[@]}")"
echo "framework checks called:        $(count '\.(Expect[A-Za-z]*|Wait[A-Za-z]*|Eventually)\(' "${suites[@]}")"
echo "t.Parallel calls:               $(count 't\.Parallel\(\)' "${suites[@]}")"
echo "own control planes started:     $(count 'framework\.Start\(' "${suites[@]}")"
echo "shared control plane uses:      $(count 'framework\.Shared\(' "${suites[@]}")"
