package main

import "testing"

// WorkerProc.__init__ names the process twice (multiproc_executor.py
// setup_proc_title_and_log_prefix): "Worker" before init_device, Worker_TP<r> after, in the
// releases modelled from vLLM's main; 0.22.1 and older name it once, after init_device.
func TestAWorkerIsNamedWorkerUntilInitDevice(t *testing.T) {
	for _, c := range []struct {
		vllm, before string
	}{{"0.32.0", "Worker"}, {"0.22.1", "Worker_TP1"}, {"0.17.1", "Worker_TP1"}} {
		p := newWorkerPrefix(release{vllm: c.vllm}, "Worker_TP1")
		if got := p.get(); got != c.before {
			t.Errorf("%s: before init_device %q, want %q", c.vllm, got, c.before)
		}
		p.initialized("Worker_TP1")
		if got := p.get(); got != "Worker_TP1" {
			t.Errorf("%s: after init_device %q, want Worker_TP1", c.vllm, got)
		}
	}
}
