// Package k8s holds the Kubernetes manifests a user applies to run capture
// proxies on NATS JetStream in a cluster and sharded load against them
// (docs/k8s.md), and decodes them
// strictly against the Kubernetes API types so tests validate them offline:
// an unknown or misspelt field, a wrong type or a duplicate key is an error.
package k8s

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"regexp"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

//go:embed *.yaml
var manifests embed.FS

// Object is one decoded manifest document.
type Object struct {
	File, Kind, Name string
	// Obj is a pointer to the typed API object (e.g. *appsv1.Deployment).
	Obj any
}

// Files lists the manifest files in apply order.
func Files() ([]string, error) {
	return fs.Glob(manifests, "*.yaml")
}

// Objects decodes every document of every manifest file.
func Objects() ([]Object, error) {
	files, err := Files()
	if err != nil {
		return nil, err
	}
	var out []Object
	for _, f := range files {
		data, err := manifests.ReadFile(f)
		if err != nil {
			return nil, err
		}
		objs, err := Decode(f, data)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

var separator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// Decode strictly decodes the YAML documents of one file.
func Decode(file string, data []byte) ([]Object, error) {
	var out []Object
	for i, doc := range separator.Split(string(data), -1) {
		if len(bytes.TrimSpace(stripComments([]byte(doc)))) == 0 {
			continue
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return nil, fmt.Errorf("%s document %d: %w", file, i+1, err)
		}
		obj, err := newObject(meta.APIVersion, meta.Kind)
		if err != nil {
			return nil, fmt.Errorf("%s document %d: %w", file, i+1, err)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return nil, fmt.Errorf("%s document %d (%s): %w", file, i+1, meta.Kind, err)
		}
		out = append(out, Object{File: file, Kind: meta.Kind, Name: nameOf(obj), Obj: obj})
	}
	return out, nil
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			b.Write(l)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// newObject returns the typed object for the kinds the manifests use.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "v1 PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}, nil
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "batch/v1 Job":
		return &batchv1.Job{}, nil
	}
	return nil, fmt.Errorf("apiVersion %q kind %q is not a kind these manifests use (ConfigMap, Service, PersistentVolumeClaim, Deployment, StatefulSet, Job)", apiVersion, kind)
}

func nameOf(obj any) string {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		return o.Name
	case *corev1.Service:
		return o.Name
	case *corev1.PersistentVolumeClaim:
		return o.Name
	case *appsv1.Deployment:
		return o.Name
	case *appsv1.StatefulSet:
		return o.Name
	case *batchv1.Job:
		return o.Name
	}
	return ""
}

// PodSpec returns the pod template of a workload object, or nil.
func PodSpec(obj any) (*corev1.PodTemplateSpec, bool) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template, true
	case *appsv1.StatefulSet:
		return &o.Spec.Template, true
	case *batchv1.Job:
		return &o.Spec.Template, true
	}
	return nil, false
}
