package main

// A hand-written typed Foo (samplecontroller.k8s.io/v1alpha1), as a controller-runtime user
// would have it from kubebuilder, minus the code generators: the few DeepCopy methods the
// scheme needs are written out below.

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var groupVersion = schema.GroupVersion{Group: "samplecontroller.k8s.io", Version: "v1alpha1"}

type FooSpec struct {
	DeploymentName string `json:"deploymentName"`
	Replicas       *int32 `json:"replicas,omitempty"`
}

type FooStatus struct {
	AvailableReplicas int32 `json:"availableReplicas"`
}

type Foo struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              FooSpec `json:"spec"`
	// A pointer, so that "never written" (nil) differs from "zero replicas available".
	Status *FooStatus `json:"status,omitempty"`
}

type FooList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Foo `json:"items"`
}

func addFooTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(groupVersion, &Foo{}, &FooList{})
	metav1.AddToGroupVersion(scheme, groupVersion)
	return nil
}

func (in *Foo) DeepCopyInto(out *Foo) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if in.Spec.Replicas != nil {
		replicas := *in.Spec.Replicas
		out.Spec.Replicas = &replicas
	}
	if in.Status != nil {
		status := *in.Status
		out.Status = &status
	}
}

func (in *Foo) DeepCopy() *Foo {
	out := new(Foo)
	in.DeepCopyInto(out)
	return out
}

func (in *Foo) DeepCopyObject() runtime.Object { return in.DeepCopy() }

func (in *FooList) DeepCopyObject() runtime.Object {
	out := new(FooList)
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]Foo, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}
