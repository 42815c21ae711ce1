package doctor_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/capbench/capbench/doctor"
	"github.com/capbench/capbench/doctor/page"
	"github.com/capbench/capbench/internal/fixtures"
)

// FuzzCheckPage feeds arbitrary pages through parsing and every page check:
// findings, never a panic.
func FuzzCheckPage(f *testing.F) {
	for _, name := range []string{"first-run.mdx", "first-run-broken.mdx", "tabs-nemo-rl.mdx"} {
		if b, err := os.ReadFile(filepath.Join("..", "testdata", "walkthrough", name)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("```bash\nvllm serve m --max-model-len\n```\n"))
	f.Add([]byte("```yaml\ntoken_id_capture: [\n```\n"))
	f.Add([]byte("```bash\njq '\n```\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		p := page.Parse("fuzz.md", src)
		if _, _, err := doctor.CheckPage(p, "48GiB"); err != nil {
			t.Fatalf("CheckPage: %v", err)
		}
		for _, b := range p.Blocks {
			_, _ = doctor.CheckOverlay([]byte(b.Text), doctor.ConfigOptions{ForGymCommand: true})
		}
	})
}

// FuzzCheckRollouts feeds arbitrary JSONL through the rollouts check.
func FuzzCheckRollouts(f *testing.F) {
	if dir, ok := fixtures.Dir(); ok {
		if b, err := os.ReadFile(filepath.Join(dir, "gym-rollouts", "rollouts.jsonl")); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"_ng_token_capture":{"n_calls":"x","terminal_attribution":7},"response":{"output":[1,{"generation_token_ids":{}}]}}`))
	f.Add([]byte(`{"mask_sample":null,"_ng_rollout_id":"../x"}` + "\n[1]\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		_, _ = doctor.CheckRollouts(bytes.NewReader(src), doctor.RolloutOptions{CaptureDir: t.TempDir(), ExpectTools: true})
	})
}
