package e2e_test

import (
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestE2E(t *testing.T) {
	// Settings this machine kind needs (no registry for the reaper image;
	// /.dockerenv misleads host detection). testcontainers reads its config
	// once, so they must be set before the first provider is created; an
	// explicit choice by the caller wins.
	for k, v := range map[string]string{"TESTCONTAINERS_RYUK_DISABLED": "true", "TESTCONTAINERS_HOST_OVERRIDE": "127.0.0.1"} {
		if os.Getenv(k) == "" {
			t.Setenv(k, v)
		}
	}
	RegisterFailHandler(Fail)
	// Shared CI machines are slow at times; a poll that is merely late must
	// not fail a spec.
	SetDefaultEventuallyTimeout(10 * time.Second)
	RunSpecs(t, "Fake vLLM E2E Suite")
}
