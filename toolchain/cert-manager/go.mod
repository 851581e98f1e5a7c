module sample-operator.local/toolchain/cert-manager

go 1.26.0

// Only downloaded, never built: the chart's test installs the CRDs this release ships
// (deploy/crds), so that the chart's Certificate passes cert-manager's own validation.
require github.com/cert-manager/cert-manager v1.21.2
