package trigger

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// metaTime truncates to seconds, as the API server stores times, so that a
// decision compares equal to what it will read back.
func metaTime(t time.Time) metav1.Time { return metav1.NewTime(t.Truncate(time.Second)) }

func ptrTime(t time.Time) *metav1.Time {
	m := metaTime(t)
	return &m
}
