module sample-operator.local/toolchain/prometheus-operator

go 1.26.0

// Only downloaded, never built: the chart's test installs the CRDs this release ships
// (example/prometheus-operator-crd).
require github.com/prometheus-operator/prometheus-operator v0.85.0
