package hostmem

import (
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	spark := Facts{TotalBytes: 119 * GiB, AvailableBytes: 110 * GiB, Unified: true}
	h200 := Facts{TotalBytes: 2000 * GiB, AvailableBytes: 1800 * GiB}
	small := Reserve{Bytes: 256 * MiB}
	for _, tc := range []struct {
		name string
		in   Input
		fits bool
		need int64
	}{
		{"a Spark at vLLM's default 0.9 does not fit", Input{Facts: spark, Ranks: 1, WorldSize: 2, ModelBytes: 120 * GiB, MultiNode: true},
			false, frac(0.9, 119*GiB) + 2*GiB + 256*MiB + frac(0.1, 119*GiB)},
		{"a Spark at 0.7 fits", Input{Facts: spark, Ranks: 1, WorldSize: 2, ModelBytes: 120 * GiB, MultiNode: true, GPUMemoryUtilization: 0.7},
			true, frac(0.7, 119*GiB) + 2*GiB + 256*MiB + frac(0.1, 119*GiB)},
		{"weights above the utilization's share count as they are", Input{Facts: spark, Ranks: 1, WorldSize: 1, ModelBytes: 100 * GiB, GPUMemoryUtilization: 0.5},
			false, 100*GiB + 2*GiB + frac(0.1, 119*GiB)},
		{"a discrete node's weights stay on its GPUs", Input{Facts: h200, Ranks: 8, WorldSize: 8, ModelBytes: 1000 * GiB},
			true, 16*GiB + 200*GiB},
		{"a small lab node with a small reserve", Input{Facts: Facts{TotalBytes: 3 * GiB, AvailableBytes: 2900 * MiB}, Ranks: 1, WorldSize: 2, MultiNode: true, Reserve: &small},
			true, 2*GiB + 256*MiB + 256*MiB},
		{"a lab node too small", Input{Facts: Facts{TotalBytes: GiB, AvailableBytes: 900 * MiB}, Ranks: 1, WorldSize: 2, MultiNode: true, Reserve: &small},
			false, 2*GiB + 256*MiB + 256*MiB},
		{"the node policy's engine_rank_memory replaces the estimate", Input{Facts: Facts{TotalBytes: GiB, AvailableBytes: 900 * MiB, EngineRankBytes: 192 * MiB}, Ranks: 1, WorldSize: 2, MultiNode: true, Reserve: &small},
			true, 192*MiB + 256*MiB + 256*MiB},
	} {
		b := Decide(tc.in)
		if b.Fits != tc.fits {
			t.Errorf("%s: fits %v, want %v (%s)", tc.name, b.Fits, tc.fits, b.Summary())
		}
		if d := b.NeedBytes - tc.need; d < -MiB || d > MiB {
			t.Errorf("%s: needs %d, want about %d (%s)", tc.name, b.NeedBytes, tc.need, b.Summary())
		}
	}
}

func TestDecideSaysWhatItCounted(t *testing.T) {
	b := Decide(Input{Node: "spark-1", Facts: Facts{TotalBytes: 119 * GiB, AvailableBytes: 110 * GiB, Unified: true}, Ranks: 1, WorldSize: 2, MultiNode: true})
	s := b.Summary()
	for _, want := range []string{"unified memory", "--gpu-memory-utilization 0.9", "host reserve 11.9 GiB", "110.0 GiB available of 119.0 GiB", "estimate"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q: %s", want, s)
		}
	}
	if len(b.Notes) == 0 {
		t.Error("an unknown model size is not noted")
	}
	if !strings.Contains(b.Fix(), "--gpu-memory-utilization") {
		t.Errorf("fix: %s", b.Fix())
	}
}

func TestParseReserve(t *testing.T) {
	for in, want := range map[string]Reserve{
		"8GiB":       {Bytes: 8 * GiB},
		"10%":        {Percent: 10},
		"8GiB, 10%":  {Bytes: 8 * GiB, Percent: 10},
		"256MiB":     {Bytes: 256 * MiB},
		"1073741824": {Bytes: GiB},
	} {
		got, err := ParseReserve(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "lots", "150%", "-1GiB"} {
		if _, err := ParseReserve(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if got := DefaultReserve.Of(200 * GiB); got != 20*GiB {
		t.Errorf("default reserve of 200 GiB: %d", got)
	}
	if got := DefaultReserve.Of(24 * GiB); got != 8*GiB {
		t.Errorf("default reserve of 24 GiB: %d", got)
	}
}

func TestUtilizationFromArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want float64
	}{
		{nil, 0},
		{[]string{"--max-model-len=4096"}, 0},
		{[]string{"--gpu-memory-utilization=0.7"}, 0.7},
		{[]string{"--gpu-memory-utilization", "0.65", "--enforce-eager"}, 0.65},
		{[]string{"--gpu_memory_utilization=0.5"}, 0.5},
	} {
		got, err := UtilizationFromArgs(tc.args)
		if err != nil || got != tc.want {
			t.Errorf("%v: %v, %v", tc.args, got, err)
		}
	}
	if _, err := UtilizationFromArgs([]string{"--gpu-memory-utilization=most"}); err == nil {
		t.Error("a bad utilization parsed")
	}
}

func frac(f float64, n int64) int64 { return int64(f * float64(n)) }
