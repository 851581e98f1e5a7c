package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

var fooResource = schema.GroupVersionResource{
	Group: "samplecontroller.k8s.io", Version: "v1alpha1", Resource: "foos",
}

// fooRef is what the writes need to know of a Foo: where it is, its Deployment's name and
// replicas, and its uid for the owner reference.
type fooRef struct {
	namespace, name, uid, deploymentName string
	replicas                             int32
	generation                           int64
}

// statusWrite is how the ceiling writes a Foo's status.
type statusWrite int

const (
	// mergedStatus: a controller's plain write, a JSON merge patch of availableReplicas.
	mergedStatus statusWrite = iota
	// oursAppliedStatus: the status as our operator writes it, by server-side apply, with the
	// observed generation and a Ready condition.
	oursAppliedStatus
	// oursMergedStatus: the same status, condition included, by a JSON merge patch: what the
	// apply costs beyond the condition.
	oursMergedStatus
)

type writer struct {
	deployments kubernetes.Interface
	foos        dynamic.NamespaceableResourceInterface
	status      statusWrite
	// event: an Event about each Foo too, as our operator writes it.
	event bool
}

func newWriter(config *rest.Config, status statusWrite, event bool) (*writer, error) {
	typed, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	untyped, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	return &writer{deployments: typed, foos: untyped.Resource(fooResource), status: status, event: event}, nil
}

// converge issues a controller's two writes for one Foo. A Deployment that already exists (a
// retry after a timeout) counts as created.
func (w *writer) converge(ctx context.Context, foo fooRef) error {
	created, err := w.deployments.AppsV1().Deployments(foo.namespace).
		Create(ctx, newDeployment(foo), metav1.CreateOptions{})
	available := int32(0)
	switch {
	case err == nil:
		available = created.Status.AvailableReplicas
	case !apierrors.IsAlreadyExists(err):
		return fmt.Errorf("creating Deployment: %w", err)
	}
	if w.status != mergedStatus {
		return w.writeAsOurs(ctx, foo, available)
	}
	status := fmt.Appendf(nil, `{"status":{"availableReplicas":%d}}`, available)
	_, err = w.foos.Namespace(foo.namespace).
		Patch(ctx, foo.name, types.MergePatchType, status, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patching status: %w", err)
	}
	return nil
}

// writeAsOurs issues the rest of our operator's writes for a Foo whose Deployment was just
// created: its status with the observed generation and a Ready condition saying the Deployment
// is progressing, as ours words it, by server-side apply as ours writes it (or by a merge
// patch, with -ours-status-merge); then one events.k8s.io Event about the Foo (with -ours), as
// ours writes it when its events are all written.
func (w *writer) writeAsOurs(ctx context.Context, foo fooRef, available int32) error {
	now := metav1.NowMicro()
	body, err := json.Marshal(oursStatus(foo, available, now.Time, w.status == oursAppliedStatus))
	if err != nil {
		return err
	}
	if w.status == oursAppliedStatus {
		_, err = w.foos.Namespace(foo.namespace).Patch(ctx, foo.name, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: "ceiling", Force: ptr.To(true)}, "status")
	} else {
		_, err = w.foos.Namespace(foo.namespace).Patch(ctx, foo.name, types.MergePatchType, body,
			metav1.PatchOptions{FieldManager: "ceiling"}, "status")
	}
	if err != nil {
		return fmt.Errorf("writing status: %w", err)
	}
	if !w.event {
		return nil
	}
	event := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x", foo.name, now.UnixNano()),
			Namespace: foo.namespace,
		},
		EventTime: now,
		Regarding: corev1.ObjectReference{
			APIVersion: "samplecontroller.k8s.io/v1alpha1", Kind: "Foo",
			Namespace: foo.namespace, Name: foo.name, UID: types.UID(foo.uid),
		},
		Type:                "Normal",
		Reason:              "Synced",
		Note:                "Foo synced successfully",
		Action:              "Sync",
		ReportingController: "ceiling",
		ReportingInstance:   "ceiling",
	}
	_, err = w.deployments.EventsV1().Events(foo.namespace).Create(ctx, event, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Event: %w", err)
	}
	return nil
}

// oursStatus is the body of ours' status write. An apply names the object it applies to; a
// merge patch needs only the fields it sets (a merge patch replaces the conditions list whole,
// which is what ours' apply does too, as the status's only manager).
func oursStatus(foo fooRef, available int32, now time.Time, apply bool) map[string]any {
	message := fmt.Sprintf("Deployment %q has %d of %d replicas available", foo.deploymentName, available, foo.replicas)
	body := map[string]any{
		"status": map[string]any{
			"availableReplicas":  available,
			"observedGeneration": foo.generation,
			"conditions": []any{map[string]any{
				"type": "Ready", "status": "False", "reason": "Progressing", "message": message,
				"observedGeneration": foo.generation,
				"lastTransitionTime": now.UTC().Format(time.RFC3339),
			}},
		},
	}
	if apply {
		body["apiVersion"] = "samplecontroller.k8s.io/v1alpha1"
		body["kind"] = "Foo"
		body["metadata"] = map[string]any{"name": foo.name, "namespace": foo.namespace}
	}
	return body
}

// newDeployment is the same Deployment the controllers build: nginx, the Foo's labels, and the
// Foo as its controller.
func newDeployment(foo fooRef) *appsv1.Deployment {
	labels := map[string]string{"app": "nginx", "controller": foo.name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:      foo.deploymentName,
			Namespace: foo.namespace,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         "samplecontroller.k8s.io/v1alpha1",
				Kind:               "Foo",
				Name:               foo.name,
				UID:                types.UID(foo.uid),
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(foo.replicas),
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
