package k8s_test

import (
	"slices"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/capbench/capbench/deploy/k8s"
)

// argAfter is the value following flag in args ("" when absent).
func argAfter(args []string, flag string) string {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return ""
	}
	return args[i+1]
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// claimAt is the claim mounted at path in the pod ("" when none).
func claimAt(p corev1.PodSpec, path string) string {
	for _, m := range p.Containers[0].VolumeMounts {
		if m.MountPath != path {
			continue
		}
		for _, v := range p.Volumes {
			if v.Name == m.Name && v.PersistentVolumeClaim != nil {
				return v.PersistentVolumeClaim.ClaimName
			}
		}
	}
	return ""
}

var _ = Describe("the sharded load manifests", func() {
	var (
		objs          []k8s.Object
		shards, merge *batchv1.Job
	)
	BeforeEach(func() {
		objs = objects()
		shards = find[*batchv1.Job](objs, "capbench-bench")
		merge = find[*batchv1.Job](objs, "capbench-merge")
	})

	It("run the load as an Indexed Job whose shard total is its completions, all at once", func() {
		Expect(shards.Spec.CompletionMode).To(HaveValue(Equal(batchv1.IndexedCompletion)))
		n := int(*shards.Spec.Completions)
		Expect(n).To(BeNumerically(">", 1))
		Expect(shards.Spec.Parallelism).To(HaveValue(BeEquivalentTo(n)), "every shard runs at the same time")
		c := shards.Spec.Template.Spec.Containers[0]
		Expect(envVar(c, "CAPBENCH_SHARDS")).NotTo(BeNil())
		Expect(envVar(c, "CAPBENCH_SHARDS").Value).To(Equal(strconv.Itoa(n)))
		idx := envVar(c, "JOB_COMPLETION_INDEX")
		Expect(idx).NotTo(BeNil(), "declared, so $(JOB_COMPLETION_INDEX) expands in the arguments")
		Expect(idx.ValueFrom.FieldRef.FieldPath).To(Equal("metadata.annotations['batch.kubernetes.io/job-completion-index']"))
		Expect(c.Args[0]).To(Equal("bench"))
		Expect(argAfter(c.Args, "--shard")).To(BeEmpty(), "the index comes from the Job")
		Expect(argAfter(c.Args, "--url")).To(Equal("http://vllm:8000"), "the vllm Service")
	})

	It("start every shard at one planned time from the START_AT the user sets", func() {
		c := shards.Spec.Template.Spec.Containers[0]
		Expect(argAfter(c.Args, "--start-at")).To(Equal("$(START_AT)"))
		start := envVar(c, "START_AT")
		Expect(start).NotTo(BeNil())
		Expect(start.Value).To(Equal("2000-01-01T00:00:00Z"), "the placeholder docs/k8s.md replaces with sed")
	})

	It("give the shard pods a headless Service as their subdomain", func() {
		svc := find[*corev1.Service](objs, shards.Spec.Template.Spec.Subdomain)
		Expect(svc.Spec.ClusterIP).To(Equal(corev1.ClusterIPNone))
		Expect(matches(svc.Spec.Selector, shards.Spec.Template.Labels)).To(BeTrue())
	})

	It("merge exactly the directories the shards write, on the volume both mount", func() {
		c := shards.Spec.Template.Spec.Containers[0]
		out := argAfter(c.Args, "--out")
		Expect(out).To(ContainSubstring("$(JOB_COMPLETION_INDEX)"))
		n := int(*shards.Spec.Completions)
		var want []string
		for i := range n {
			want = append(want, strings.ReplaceAll(out, "$(JOB_COMPLETION_INDEX)", strconv.Itoa(i)))
		}
		m := merge.Spec.Template.Spec.Containers[0]
		Expect(m.Args[0]).To(Equal("merge"))
		var inputs []string
		for _, a := range m.Args[1:] {
			if strings.HasPrefix(a, "/results/shard-") {
				inputs = append(inputs, a)
			}
		}
		Expect(inputs).To(Equal(want))
		claim := claimAt(shards.Spec.Template.Spec, "/results")
		Expect(claim).NotTo(BeEmpty())
		Expect(claimAt(merge.Spec.Template.Spec, "/results")).To(Equal(claim))
		pvc := find[*corev1.PersistentVolumeClaim](objs, claim)
		Expect(pvc.Spec.AccessModes).To(ContainElement(corev1.ReadWriteMany), "shards on several nodes write at once")
		for _, j := range []*batchv1.Job{shards, merge} {
			Expect(j.Spec.Template.Spec.SecurityContext.FSGroup).To(HaveValue(BeEquivalentTo(65534)), "%s: uid 65534 can write the volume", j.Name)
		}
	})
})
