package gympeer

import (
	"time"

	"github.com/capbench/capbench/internal/stats"
)

// Paired collects one figure per round for ours and for Gym, measured in
// alternating order in the same run, so the ratio compares rounds that saw
// the same machine load.
type Paired struct {
	ours, gym []float64
}

// OursFirst says which side goes first in round i: ours on even rounds,
// Gym's on odd ones, so neither always runs on the warmer machine.
func OursFirst(i int) bool { return i%2 == 0 }

// Add records one round.
func (p *Paired) Add(ours, gym time.Duration) {
	p.ours = append(p.ours, ours.Seconds())
	p.gym = append(p.gym, gym.Seconds())
}

// Rounds is how many rounds were recorded.
func (p *Paired) Rounds() int { return len(p.ours) }

// Ratio is the median of the per-round gym/ours time ratios: how many times
// faster ours is (0 when no round was recorded).
func (p *Paired) Ratio() float64 {
	rs := make([]float64, 0, len(p.ours))
	for i, o := range p.ours {
		if o > 0 {
			rs = append(rs, p.gym[i]/o)
		}
	}
	return stats.Median(rs)
}

// Ours and Gym are the median per-round times in milliseconds.
func (p *Paired) Ours() float64 { return stats.Median(p.ours) * 1e3 }
func (p *Paired) Gym() float64  { return stats.Median(p.gym) * 1e3 }
