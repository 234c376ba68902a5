package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// checkWeights refuses a model directory vLLM could not load, with upstream's texts; every
// rank runs it on its own node, so a node that lacks a shard fails as it would for real.
// A model path that is not a directory on this node is a Hugging Face name (the lab's
// default models are only names): nothing is checked.
//
//   - no config.json: transformers' cached_files (src/transformers/utils/hub.py) for a
//     local directory: OSError "<dir> does not appear to have a file named config.json.
//     Checkout 'https://huggingface.co/<dir>/tree/main' for available files."
//   - a shard a safetensors index lists is not there: vLLM's
//     filter_duplicate_safetensors_files (vllm/model_executor/model_loader/weight_utils.py,
//     since early 2026) raises FileNotFoundError "Weight files referenced in index but
//     missing: {...}", a Python set of the full paths (os.path.join of the directory and
//     the weight_map value). Upstream reads the index of the load format
//     (model.safetensors.index.json for HF checkpoints); the lab reads every
//     *.safetensors.index.json, as tpdeploy's preflight does.
//   - no weights at all: DefaultModelLoader._prepare_weights
//     (vllm/model_executor/model_loader/default_loader.py) raises RuntimeError "Cannot find
//     any model weights with `<dir>`" before any index is read.
//
// The returned error reads "Exception: message", as the simulator's other fatal errors do;
// log receives the worker's own line for a failed load_model.
func checkWeights(modelPath string, log func(level, where, msg string)) error {
	if fi, err := os.Stat(modelPath); err != nil || !fi.IsDir() {
		return nil
	}
	if fi, err := os.Stat(filepath.Join(modelPath, "config.json")); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("OSError: %s does not appear to have a file named config.json. Checkout 'https://huggingface.co/%s/tree/main' for available files.", modelPath, modelPath)
	}
	loadFailed := func(err error) error {
		log("ERROR", "worker_base.py:620", "Error executing method 'load_model'. This might cause deadlock in distributed execution.")
		return err
	}
	present := func(pattern string) []string {
		m, _ := filepath.Glob(filepath.Join(modelPath, pattern))
		return m
	}
	if len(present("*.safetensors")) == 0 {
		if len(present("*.bin")) > 0 || len(present("*.pt")) > 0 {
			return nil // PyTorch checkpoints: loaded without an index check, not modelled
		}
		return loadFailed(fmt.Errorf("RuntimeError: Cannot find any model weights with `%s`", modelPath))
	}
	missing := map[string]bool{}
	for _, idx := range present("*.safetensors.index.json") {
		b, err := os.ReadFile(idx)
		if err != nil {
			continue
		}
		var index struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(b, &index); err != nil {
			continue // json's own error is not modelled
		}
		for _, shard := range index.WeightMap {
			full := pyJoin(modelPath, shard)
			if fi, err := os.Stat(full); err != nil || !fi.Mode().IsRegular() {
				missing[full] = true
			}
		}
	}
	if len(missing) > 0 {
		return loadFailed(fmt.Errorf("FileNotFoundError: Weight files referenced in index but missing: %s", pySet(missing)))
	}
	return nil
}

// pyJoin joins as Python's os.path.join does: no cleaning, one separator.
func pyJoin(dir, name string) string {
	if strings.HasSuffix(dir, "/") {
		return dir + name
	}
	return dir + "/" + name
}
