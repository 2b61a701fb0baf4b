package envtest_test

import (
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// BenchmarkEnvironmentStart: one envtest control plane started (CRDs installed and served)
// and stopped, as every operator suite does at least once; start-s and stop-s split the time.
func BenchmarkEnvironmentStart(b *testing.B) {
	var starting, stopping time.Duration
	for i := 0; i < b.N; i++ {
		env := &envtest.Environment{CRDDirectoryPaths: []string{"testdata"}, ErrorIfCRDPathMissing: true}
		began := time.Now()
		if _, err := env.Start(); err != nil {
			b.Fatalf("start: %v", err)
		}
		started := time.Now()
		if err := env.Stop(); err != nil {
			b.Fatalf("stop: %v", err)
		}
		starting += started.Sub(began)
		stopping += time.Since(started)
	}
	b.ReportMetric(starting.Seconds()/float64(b.N), "start-s")
	b.ReportMetric(stopping.Seconds()/float64(b.N), "stop-s")
}
