package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

// discoverFoos sends every Foo to out once: those that exist now from a paged LIST, then those
// created later from a WATCH that starts at the LIST's resourceVersion, until ctx ends.
func discoverFoos(ctx context.Context, foos dynamic.NamespaceableResourceInterface, namespace string, out chan<- fooRef) error {
	seen := map[string]bool{}
	// The Foo of obj if it was not sent before.
	fresh := func(obj *unstructured.Unstructured) (fooRef, bool) {
		foo, err := toFooRef(obj)
		if err != nil {
			log.Printf("skipping %s/%s: %v", obj.GetNamespace(), obj.GetName(), err)
			return fooRef{}, false
		}
		if seen[foo.uid] {
			return fooRef{}, false
		}
		seen[foo.uid] = true
		return foo, true
	}
	// A list's Foos go out once it has every page, as an informer's first list does: sent page
	// by page, as fast as the writers take them, a backlog of 100,000 kept the list open longer
	// than etcd keeps its revision (5 minutes here), and the apiserver refused the next page.
	// They go out while the watch runs, as an informer's queue holds them, so that the watch
	// starts from a revision etcd still has.
	var sending sync.WaitGroup
	defer sending.Wait()
	list := func() (string, error) {
		var listed []fooRef
		resourceVersion, err := listFoos(ctx, foos.Namespace(namespace), func(obj *unstructured.Unstructured) {
			if foo, ok := fresh(obj); ok {
				listed = append(listed, foo)
			}
		})
		if err != nil {
			return "", err
		}
		sending.Go(func() {
			for _, foo := range listed {
				select {
				case out <- foo:
				case <-ctx.Done():
					return
				}
			}
		})
		return resourceVersion, nil
	}
	resourceVersion, err := list()
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		resourceVersion, err = watchFoos(ctx, foos.Namespace(namespace), resourceVersion, func(obj *unstructured.Unstructured) {
			if foo, ok := fresh(obj); ok {
				out <- foo
			}
		})
		if errors.Is(err, errExpired) {
			// The apiserver compacted past our resourceVersion while we wrote (a backlog of
			// 100,000 Foos takes minutes): list again, as an informer does; `seen` keeps each
			// Foo sent once.
			resourceVersion, err = list()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// errExpired is a watch that the apiserver ended with 410 Gone: its resourceVersion is too old.
var errExpired = errors.New("resourceVersion expired")

// listFoos pages through the Foos (500 a page, as informers do) and returns the resourceVersion
// to watch from.
func listFoos(ctx context.Context, foos dynamic.ResourceInterface, send func(*unstructured.Unstructured)) (string, error) {
	options := metav1.ListOptions{Limit: 500}
	for {
		page, err := foos.List(ctx, options)
		if err != nil {
			return "", err
		}
		for i := range page.Items {
			send(&page.Items[i])
		}
		if page.GetContinue() == "" {
			return page.GetResourceVersion(), nil
		}
		options.Continue = page.GetContinue()
	}
}

// watchFoos sends the Foos added while one watch lasts and returns the resourceVersion to resume
// from when the server closes it.
func watchFoos(ctx context.Context, foos dynamic.ResourceInterface, resourceVersion string, send func(*unstructured.Unstructured)) (string, error) {
	w, err := foos.Watch(ctx, metav1.ListOptions{ResourceVersion: resourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		return resourceVersion, err
	}
	defer w.Stop()
	for event := range w.ResultChan() {
		obj, ok := event.Object.(*unstructured.Unstructured)
		if !ok {
			if status, isStatus := event.Object.(*metav1.Status); isStatus && status.Code == http.StatusGone {
				return resourceVersion, errExpired
			}
			return resourceVersion, fmt.Errorf("watch error: %v", event.Object)
		}
		resourceVersion = obj.GetResourceVersion()
		if event.Type == watch.Added {
			send(obj)
		}
	}
	return resourceVersion, nil
}

func toFooRef(obj *unstructured.Unstructured) (fooRef, error) {
	deploymentName, _, err := unstructured.NestedString(obj.Object, "spec", "deploymentName")
	if err != nil || deploymentName == "" {
		return fooRef{}, fmt.Errorf("no spec.deploymentName")
	}
	replicas, found, err := unstructured.NestedInt64(obj.Object, "spec", "replicas")
	if err != nil {
		return fooRef{}, fmt.Errorf("spec.replicas: %w", err)
	}
	if !found {
		replicas = 1
	}
	return fooRef{
		namespace:      obj.GetNamespace(),
		name:           obj.GetName(),
		uid:            string(obj.GetUID()),
		deploymentName: deploymentName,
		replicas:       int32(replicas),
		generation:     obj.GetGeneration(),
	}, nil
}
