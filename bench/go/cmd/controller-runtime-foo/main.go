// Command controller-runtime-foo is the Foo controller as a Go user writes it today on
// controller-runtime: a manager with its defaults (shared cache, one reconcile at a time, no
// client-side rate limit, a metrics server) and a reconciler that keeps one nginx Deployment per
// Foo and reports its available replicas. It is a benchmark contender, so it does what our
// operator's Foo controller does and nothing more.
//
// Three flags tune it as its users tune it in production, each off by default: more
// concurrent reconciles, a cache transform dropping managedFields, and a cache of only the
// Deployments it labelled.
//
// Usage: controller-runtime-foo -kubeconfig PATH [-metrics-bind-address ADDR]
// [-max-concurrent-reconciles N] [-strip-managed-fields] [-deployment-selector SELECTOR]
package main

import (
	"flag"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	// The flag lets the benchmark move the metrics server off the default :8080, which another
	// program may hold; controller-runtime registers -kubeconfig itself.
	var metricsAddr string
	flag.StringVar(&metricsAddr, "metrics-bind-address", metricsserver.DefaultBindAddress,
		"The address the metrics endpoint binds to; 0 disables it.")
	var maxConcurrent int
	flag.IntVar(&maxConcurrent, "max-concurrent-reconciles", 1,
		"Reconciles in flight at once (controller.Options.MaxConcurrentReconciles; 1 is the default).")
	var stripManagedFields bool
	flag.BoolVar(&stripManagedFields, "strip-managed-fields", false,
		"Drop managedFields from every cached object (cache.Options.DefaultTransform).")
	var deploymentSelector string
	flag.StringVar(&deploymentSelector, "deployment-selector", "",
		"Cache only the Deployments matching this label selector (cache.Options.ByObject).")
	logOptions := zap.Options{}
	logOptions.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&logOptions)))
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(addFooTypes(scheme))

	cacheOptions := cache.Options{}
	if stripManagedFields {
		cacheOptions.DefaultTransform = cache.TransformStripManagedFields()
	}
	if deploymentSelector != "" {
		selector, err := labels.Parse(deploymentSelector)
		if err != nil {
			log.Error(err, "bad -deployment-selector")
			os.Exit(2)
		}
		cacheOptions.ByObject = map[client.Object]cache.ByObject{
			&appsv1.Deployment{}: {Label: selector},
		}
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: metricsAddr},
		Cache:   cacheOptions,
	})
	if err != nil {
		log.Error(err, "cannot create the manager")
		os.Exit(1)
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("foo").
		For(&Foo{}).
		Owns(&appsv1.Deployment{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrent}).
		Complete(&fooReconciler{Client: mgr.GetClient(), scheme: mgr.GetScheme()})
	if err != nil {
		log.Error(err, "cannot create the Foo controller")
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
