package main

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// fooReconciler keeps, for each Foo, a Deployment named spec.deploymentName that the Foo
// controls, and writes the Deployment's available replicas into the Foo's status.
type fooReconciler struct {
	client.Client
	scheme *runtime.Scheme
}

func (r *fooReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var foo Foo
	if err := r.Get(ctx, req.NamespacedName, &foo); err != nil {
		// A deleted Foo needs nothing: the garbage collector removes what it owned.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	deployment, err := r.ensureDeployment(ctx, &foo)
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.writeStatus(ctx, &foo, deployment)
}

// ensureDeployment creates the Foo's Deployment when it is missing and corrects its replicas
// when they drifted; a Deployment of that name that the Foo does not control is left alone.
func (r *fooReconciler) ensureDeployment(ctx context.Context, foo *Foo) (*appsv1.Deployment, error) {
	var deployment appsv1.Deployment
	key := types.NamespacedName{Namespace: foo.Namespace, Name: foo.Spec.DeploymentName}
	err := r.Get(ctx, key, &deployment)
	if apierrors.IsNotFound(err) {
		desired := newDeployment(foo)
		if err := controllerutil.SetControllerReference(foo, desired, r.scheme); err != nil {
			return nil, err
		}
		return desired, r.Create(ctx, desired)
	}
	if err != nil {
		return nil, err
	}
	if !metav1.IsControlledBy(&deployment, foo) {
		return nil, fmt.Errorf("deployment %s/%s exists and is not controlled by Foo %s",
			deployment.Namespace, deployment.Name, foo.Name)
	}
	if replicas := desiredReplicas(foo); deployment.Spec.Replicas == nil || *deployment.Spec.Replicas != replicas {
		deployment.Spec.Replicas = &replicas
		return &deployment, r.Update(ctx, &deployment)
	}
	return &deployment, nil
}

// writeStatus patches status.availableReplicas, and only when it differs from what the Foo
// shows, so a converged Foo costs no write.
func (r *fooReconciler) writeStatus(ctx context.Context, foo *Foo, deployment *appsv1.Deployment) error {
	available := deployment.Status.AvailableReplicas
	if foo.Status != nil && foo.Status.AvailableReplicas == available {
		return nil
	}
	patch := client.MergeFrom(foo.DeepCopy())
	foo.Status = &FooStatus{AvailableReplicas: available}
	return r.Status().Patch(ctx, foo, patch)
}

// desiredReplicas is spec.replicas, or the Deployment default of 1 when unset.
func desiredReplicas(foo *Foo) int32 {
	if foo.Spec.Replicas != nil {
		return *foo.Spec.Replicas
	}
	return 1
}

// managedByLabel marks the Deployments this controller makes, so that a cache can be limited to
// them (-deployment-selector), as our operator limits its own.
const managedByLabel = "app.kubernetes.io/managed-by"
const managedBy = "controller-runtime-foo"

// newDeployment is the Foo's nginx Deployment, labelled as kubernetes/sample-controller does,
// plus the managed-by label on the Deployment itself.
func newDeployment(foo *Foo) *appsv1.Deployment {
	labels := map[string]string{"app": "nginx", "controller": foo.Name}
	replicas := desiredReplicas(foo)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:      foo.Spec.DeploymentName,
			Namespace: foo.Namespace,
			Labels:    map[string]string{managedByLabel: managedBy},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "nginx", Image: "nginx:latest"}},
				},
			},
		},
	}
}
