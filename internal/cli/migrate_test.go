package cli

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/svm-project/svm/internal/operation"
)

func TestPrintSummary(t *testing.T) {
	remaining := int64(500)
	tests := []struct {
		name    string
		res     operation.RunResult
		err     error
		want    string
		wantErr string
	}{
		{
			name: "every object re-stored",
			res:  operation.RunResult{State: operation.State{Progress: operation.Progress{Counts: operation.Counts{Listed: 10, Restored: 10}}}},
			want: "widgets.example.com: done: 10 listed: migrated 10 (re-stored 10, already current 0), written since the start 0, gone 0, failed 0 in 1.5s\n",
		},
		{
			name: "already current: the API server wrote nothing",
			res:  operation.RunResult{State: operation.State{Progress: operation.Progress{Counts: operation.Counts{Listed: 10, AlreadyCurrent: 10}}}},
			want: "widgets.example.com: done: 10 listed: migrated 10 (re-stored 0, already current 10), written since the start 0, gone 0, failed 0 in 1.5s\n",
		},
		{
			name: "written by others and gone, some known beforehand",
			res:  operation.RunResult{State: operation.State{Progress: operation.Progress{Counts: operation.Counts{Listed: 10, Restored: 6, WrittenSinceStart: 3, Gone: 1, SkippedWithoutWrite: 3}}}},
			want: "widgets.example.com: done: 10 listed: migrated 6 (re-stored 6, already current 0), written since the start 3, gone 1, failed 0 in 1.5s\n" +
				"  not written, known beforehand: 3; found by a conflict or not found: 1\n",
		},
		{
			name: "failed, more than are named",
			res: operation.RunResult{State: operation.State{
				Progress:      operation.Progress{Counts: operation.Counts{Listed: 10, Restored: 7, Failed: 3}},
				FailedObjects: []operation.FailedObject{{Namespace: "ns", Name: "w-1", Reason: "denied"}, {Name: "w-2", Reason: "denied"}},
			}},
			err: &operation.ObjectsFailedError{Count: 3},
			want: "widgets.example.com: done, with failed objects: 10 listed: migrated 7 (re-stored 7, already current 0), written since the start 0, gone 0, failed 3 in 1.5s\n" +
				"  failed ns/w-1: denied\n  failed w-2: denied\n  ... and 1 more\n",
		},
		{
			name: "stopped by an outage: says so first and last, counts what is known",
			res:  operation.RunResult{State: operation.State{Progress: operation.Progress{Counts: operation.Counts{Listed: 500, Restored: 500}, RemainingEstimate: &remaining}}},
			err:  errors.New("rewrite widgets ns/w-501: conversion webhook for example.com/v1, Kind=Widget failed: connection refused"),
			want: "widgets.example.com: stopped: 500 listed: migrated 500 (re-stored 500, already current 0), written since the start 0, gone 0, failed 0 in 1.5s\n",
			wantErr: "widgets.example.com: stopped before the end, about 500 objects not listed yet not migrated: " +
				"rewrite widgets ns/w-501: conversion webhook for example.com/v1, Kind=Widget failed: connection refused; run it again to finish\n",
		},
		{
			name:    "failed at once",
			err:     &operation.TerminalError{Reason: "ResourceNotFound", Err: errors.New("the server does not serve example.com/v1")},
			want:    "widgets.example.com: failed: ResourceNotFound: 0 listed: migrated 0 (re-stored 0, already current 0), written since the start 0, gone 0, failed 0 in 1.5s\n",
			wantErr: "widgets.example.com: the server does not serve example.com/v1\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			printSummary(&out, "widgets.example.com", tt.res, tt.err, 1500*time.Millisecond)
			printFailure(&errOut, "widgets.example.com", tt.res, tt.err)
			if diff := cmp.Diff(tt.want, out.String()); diff != "" {
				t.Errorf("summary (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantErr, errOut.String()); diff != "" {
				t.Errorf("error output (-want +got):\n%s", diff)
			}
		})
	}
}
