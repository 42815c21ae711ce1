package doctor_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/doctor"
	"github.com/capbench/capbench/harness/env"
	"github.com/capbench/capbench/scenarios"
)

func walkthroughServer() scenarios.Server {
	return scenarios.Server{Model: scenarios.DefaultModel, MaxModelLen: 65536, EnableAutoToolChoice: true, ToolCallParser: "hermes"}
}

func startStack(ctx context.Context, s scenarios.Server) (env.Env, string) {
	GinkgoHelper()
	dir := GinkgoT().TempDir()
	e, err := env.Start(ctx, env.Spec{Backend: env.InProcess, Server: s, CaptureDir: dir})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(e.Close)
	return e, dir
}

func failed(r *doctor.Report) []string {
	var out []string
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c.Name)
		}
	}
	return out
}

var _ = Describe("doctor server (in-process fake vLLM + capture proxy)", Label("inprocess"), func() {
	DescribeTable("each check with a stack that passes it and one that fails it",
		func(ctx SpecContext, mutate func(*scenarios.Server), proxyToVLLM bool, wantFailed []string) {
			s := walkthroughServer()
			if mutate != nil {
				mutate(&s)
			}
			e, dir := startStack(ctx, s)
			proxy := e.ProxyURL()
			if proxyToVLLM {
				proxy = e.VLLMURL()
			}
			rep := doctor.CheckServer(ctx, doctor.ServerOptions{URL: e.VLLMURL() + "/v1", ProxyURL: proxy, CaptureDir: dir})
			Expect(rep.Checks).To(HaveLen(5))
			Expect(failed(rep)).To(Equal(wantFailed), "%+v", rep.Checks)
			Expect(rep.OK()).To(Equal(len(wantFailed) == 0))
		},
		Entry("the walkthrough's stack passes", nil, false, []string(nil), SpecTimeout(30*time.Second)),
		Entry("no tool flags fails the tool check", func(s *scenarios.Server) { s.EnableAutoToolChoice, s.ToolCallParser = false, "" }, false,
			[]string{"auto tool choice accepted"}, SpecTimeout(30*time.Second)),
		Entry("a 16k context fails the 32k check", func(s *scenarios.Server) { s.MaxModelLen = 16384 }, false,
			[]string{"context holds a 32,000-token request"}, SpecTimeout(30*time.Second)),
		Entry("a proxy URL that is vLLM itself fails the capture check", nil, true,
			[]string{"capture call lands in the capture directory"}, SpecTimeout(30*time.Second)),
	)

	It("stops at an unreachable server with the reason", func(ctx SpecContext) {
		rep := doctor.CheckServer(ctx, doctor.ServerOptions{URL: "http://127.0.0.1:1"})
		Expect(rep.Checks).To(HaveLen(1))
		Expect(rep.Findings[0].Rule).To(Equal("server/unreachable"))
	}, SpecTimeout(30*time.Second))

	It("names the served models when --model is not among them", func(ctx SpecContext) {
		e, _ := startStack(ctx, walkthroughServer())
		rep := doctor.CheckServer(ctx, doctor.ServerOptions{URL: e.VLLMURL(), Model: "gpt-9"})
		Expect(rep.Findings[0].Rule).To(Equal("server/model-not-served"))
		Expect(rep.Findings[0].Message).To(ContainSubstring(scenarios.DefaultModel))
	}, SpecTimeout(30*time.Second))
})
