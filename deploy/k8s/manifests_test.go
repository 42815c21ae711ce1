package k8s_test

import (
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/nats-io/nats-server/v2/server"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/capbench/capbench/capture/store/natsstore"
	"github.com/capbench/capbench/deploy/k8s"
)

func objects() []k8s.Object {
	objs, err := k8s.Objects()
	Expect(err).NotTo(HaveOccurred())
	Expect(objs).NotTo(BeEmpty())
	return objs
}

func find[T any](objs []k8s.Object, name string) T {
	for _, o := range objs {
		if t, ok := o.Obj.(T); ok && o.Name == name {
			return t
		}
	}
	Fail("no object named " + name)
	var zero T
	return zero
}

func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// containerPort resolves a Service target port against a container list.
func containerPort(cs []corev1.Container, target intstr.IntOrString) bool {
	for _, c := range cs {
		for _, p := range c.Ports {
			if target.Type == intstr.String && p.Name == target.StrVal ||
				target.Type == intstr.Int && p.ContainerPort == target.IntVal {
				return true
			}
		}
	}
	return false
}

var _ = Describe("the manifests in deploy/k8s", func() {
	It("decode strictly against the Kubernetes API types", func() {
		files, err := k8s.Files()
		Expect(err).NotTo(HaveOccurred())
		Expect(files).To(ConsistOf("bench-merge.yaml", "bench-shards.yaml", "fake-vllm.yaml", "nats.yaml", "proxy.yaml", "verdict-job.yaml", "vllm-service.yaml"))
		kinds := map[string]int{}
		for _, o := range objects() {
			kinds[o.Kind]++
			Expect(o.Name).NotTo(BeEmpty(), "%s: a %s without a name", o.File, o.Kind)
		}
		Expect(kinds).To(Equal(map[string]int{"ConfigMap": 1, "Service": 5, "StatefulSet": 1, "Deployment": 2, "Job": 3, "PersistentVolumeClaim": 1}))
	})

	DescribeTable("reject what the API server would refuse",
		func(doc, want string) {
			_, err := k8s.Decode("bad.yaml", []byte(doc))
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("a misspelt field", "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  selectr: {a: b}\n", `unknown field "selectr"`),
		Entry("a field of the wrong type", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  replicas: three\n", "replicas"),
		Entry("a duplicate key", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  name: y\n", "name"),
		Entry("a kind they do not use", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n", `kind "Pod"`),
	)

	It("select their own pods, and every Service reaches a named container port", func() {
		objs := objects()
		var pods []*corev1.PodTemplateSpec
		for _, o := range objs {
			switch w := o.Obj.(type) {
			case *appsv1.Deployment:
				Expect(matches(w.Spec.Selector.MatchLabels, w.Spec.Template.Labels)).To(BeTrue(), "%s selects its pods", o.Name)
			case *appsv1.StatefulSet:
				Expect(matches(w.Spec.Selector.MatchLabels, w.Spec.Template.Labels)).To(BeTrue(), "%s selects its pods", o.Name)
			}
			if p, ok := k8s.PodSpec(o.Obj); ok {
				pods = append(pods, p)
			}
		}
		for _, o := range objs {
			svc, ok := o.Obj.(*corev1.Service)
			if !ok {
				continue
			}
			var backends []*corev1.PodTemplateSpec
			for _, p := range pods {
				if matches(svc.Spec.Selector, p.Labels) {
					backends = append(backends, p)
				}
			}
			Expect(backends).NotTo(BeEmpty(), "Service %s selects no pod of these manifests", svc.Name)
			for _, port := range svc.Spec.Ports {
				for _, b := range backends {
					Expect(containerPort(b.Spec.Containers, port.TargetPort)).To(BeTrue(),
						"Service %s port %s targets %s, which pod %v does not expose", svc.Name, port.Name, port.TargetPort.String(), b.Labels)
				}
			}
		}
	})

	It("run capbench from the FROM scratch image: no shell, not as root, read-only root", func() {
		n := 0
		for _, o := range objects() {
			p, ok := k8s.PodSpec(o.Obj)
			if !ok {
				continue
			}
			for _, c := range p.Spec.Containers {
				if !strings.HasPrefix(c.Image, "capbench:") {
					continue
				}
				n++
				Expect(c.Command).To(BeEmpty(), "%s: the image's entrypoint is /capbench; scratch has no shell", o.Name)
				Expect(c.Args).NotTo(BeEmpty())
				sc := c.SecurityContext
				Expect(sc).NotTo(BeNil())
				Expect(sc.RunAsNonRoot).To(HaveValue(BeTrue()))
				Expect(sc.ReadOnlyRootFilesystem).To(HaveValue(BeTrue()))
			}
		}
		Expect(n).To(Equal(5))
	})

	It("give the NATS servers a config the server accepts, with room for 32k-token records", func() {
		objs := objects()
		cm := find[*corev1.ConfigMap](objs, "nats-config")
		sts := find[*appsv1.StatefulSet](objs, "nats")
		dir := GinkgoT().TempDir()
		path := filepath.Join(dir, "nats.conf")
		Expect(os.WriteFile(path, []byte(cm.Data["nats.conf"]), 0o644)).To(Succeed())
		GinkgoT().Setenv("POD_NAME", "nats-1")
		opts, err := server.ProcessConfigFile(path)
		Expect(err).NotTo(HaveOccurred())
		Expect(opts.JetStream).To(BeTrue())
		Expect(opts.ServerName).To(Equal("nats-1"))
		Expect(opts.MaxPayload).To(BeNumerically(">=", 8<<20))
		Expect(opts.Routes).To(HaveLen(int(*sts.Spec.Replicas)))
		for _, r := range opts.Routes {
			Expect(r.Hostname()).To(HavePrefix(sts.Name + "-"))
			Expect(r.Hostname()).To(HaveSuffix("." + sts.Spec.ServiceName))
		}
		mounts := sts.Spec.Template.Spec.Containers[0].VolumeMounts
		Expect(slices.ContainsFunc(mounts, func(m corev1.VolumeMount) bool { return m.MountPath == opts.StoreDir && m.Name == "data" })).
			To(BeTrue(), "store_dir %s must be the data volume", opts.StoreDir)
		Expect(sts.Spec.VolumeClaimTemplates).To(HaveLen(1))
	})

	It("point every --store at the nats Service with as many replicas as servers", func() {
		objs := objects()
		sts := find[*appsv1.StatefulSet](objs, "nats")
		svc := find[*corev1.Service](objs, "nats")
		n := 0
		for _, o := range objs {
			p, ok := k8s.PodSpec(o.Obj)
			if !ok {
				continue
			}
			for _, c := range p.Spec.Containers {
				i := slices.Index(c.Args, "--store")
				if i < 0 {
					continue
				}
				n++
				Expect(len(c.Args)).To(BeNumerically(">", i+1))
				opts, err := natsstore.ParseURL(c.Args[i+1])
				Expect(err).NotTo(HaveOccurred())
				Expect(opts.Replicas).To(Equal(int(*sts.Spec.Replicas)))
				u, err := url.Parse(opts.URL)
				Expect(err).NotTo(HaveOccurred())
				Expect(u.Hostname()).To(Equal(svc.Name))
				Expect(u.Port()).To(Equal("4222"))
			}
		}
		Expect(n).To(Equal(2), "the proxy and the verdict job")
	})
})
