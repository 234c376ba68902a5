package spec

import "strings"

// Variables that make a runtime or a library in the image execute code, load a library or
// read configuration the spec's author chooses. A node's env reaches every container of
// the node, so any of them turns "can start a workflow" into "runs code as root in a
// container on the host network". They are refused in every spec (whatever the node's
// policy allows); an operator who needs one bakes it into the image.
//
// Sources: ld.so(8) (LD_*, GCONV_PATH through iconv, GLIBC_TUNABLES), python(1)'s
// environment (PYTHONSTARTUP, PYTHONPATH, PYTHONWARNINGS naming a module to import, which
// with BROWSER runs a command at start-up through the antigravity/webbrowser modules;
// PYTHONHOME, PYTHONUSERBASE, PYTHONBREAKPOINT, PYTHONINSPECT...), bash(1) (BASH_ENV, ENV,
// SHELLOPTS, PS4 with xtrace, BASH_FUNC_* exported functions), perlrun(1) (PERL5OPT,
// PERL5LIB, PERLLIB, PERL5DB), node(1) (NODE_OPTIONS --require, NODE_PATH), ruby(1)
// (RUBYOPT, RUBYLIB), the JVM (JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS, _JAVA_OPTIONS -javaagent),
// Ray (RAY_RUNTIME_ENV_HOOK, RAY_START_HOOK and RAY_JOB_SUBMIT_HOOK import a Python
// callable), vLLM (VLLM_LOGGING_CONFIG_PATH is a logging dictConfig, whose "()" key
// instantiates any class), NCCL (NCCL_NET_PLUGIN, NCCL_TUNER_PLUGIN, NCCL_PROFILER_PLUGIN,
// NCCL_ENV_PLUGIN load a shared library by name or path), UCX (UCX_MODULE_DIR), and PATH,
// and HOME (which `vllm`/`ray` the entrypoint runs; Python's user site
// directory under HOME runs *.pth files).
var codeEnvExact = map[string]string{
	"BROWSER":                  "Python's webbrowser module runs it as a command",
	"BASH_ENV":                 "bash runs the file it names",
	"ENV":                      "sh runs the file it names",
	"SHELLOPTS":                "sets shell options (xtrace with PS4 runs commands)",
	"BASHOPTS":                 "sets shell options",
	"PS4":                      "bash expands it (command substitution) under xtrace",
	"PROMPT_COMMAND":           "bash runs it",
	"IFS":                      "changes how shells split words",
	"PERL5OPT":                 "perl takes it as command-line options (-M loads a module)",
	"PERL5LIB":                 "perl loads modules from it",
	"PERLLIB":                  "perl loads modules from it",
	"PERL5DB":                  "perl runs it as its debugger",
	"NODE_OPTIONS":             "node takes it as options (--require loads a module)",
	"NODE_PATH":                "node loads modules from it",
	"RUBYOPT":                  "ruby takes it as options (-r loads a library)",
	"RUBYLIB":                  "ruby loads libraries from it",
	"JAVA_TOOL_OPTIONS":        "the JVM takes it as options (-javaagent loads code)",
	"JDK_JAVA_OPTIONS":         "the JVM takes it as options",
	"_JAVA_OPTIONS":            "the JVM takes it as options",
	"GCONV_PATH":               "glibc's iconv loads modules from it",
	"GLIBC_TUNABLES":           "changes glibc's behaviour (CVE-2023-4911)",
	"HOSTALIASES":              "changes how names resolve",
	"PATH":                     "chooses which program the entrypoint runs",
	"HOME":                     "moves Python's user site directory, whose *.pth files run",
	"RAY_RUNTIME_ENV_HOOK":     "Ray imports and calls the Python callable it names",
	"RAY_START_HOOK":           "Ray imports and calls the Python callable it names",
	"RAY_JOB_SUBMIT_HOOK":      "Ray imports and calls the Python callable it names",
	"VLLM_LOGGING_CONFIG_PATH": "vLLM loads it as a logging dictConfig, which instantiates any class",
	"VLLM_CONFIG_ROOT":         "set by tpdeploy (ray_non_carry_over_env_vars.json)",
	"NCCL_NET_PLUGIN":          "NCCL loads the shared library it names",
	"NCCL_TUNER_PLUGIN":        "NCCL loads the shared library it names",
	"NCCL_PROFILER_PLUGIN":     "NCCL loads the shared library it names",
	"NCCL_ENV_PLUGIN":          "NCCL loads the shared library it names",
	"NCCL_CONF_FILE":           "NCCL reads variables (plugins among them) from the file it names",
	"UCX_MODULE_DIR":           "UCX loads modules from it",
	"OPAL_PREFIX":              "Open MPI loads components from it",
}

// CodeExecEnv says whether a variable makes a program in the image execute code or load a
// library the spec's author chooses, and why. PYTHONHASHSEED is the one PYTHON* variable
// allowed (a seed, not code).
func CodeExecEnv(name string) (string, bool) {
	n := strings.ToUpper(name)
	if why, ok := codeEnvExact[n]; ok {
		return why, true
	}
	switch {
	case strings.HasPrefix(n, "LD_"):
		return "the dynamic linker acts on it (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT load libraries)", true
	case strings.HasPrefix(n, "PYTHON") && n != "PYTHONHASHSEED":
		return "the Python interpreter acts on it (PYTHONSTARTUP, PYTHONPATH, PYTHONWARNINGS and others import or run code)", true
	case strings.HasSuffix(n, "_PRELOAD"):
		return "a preload variable loads a library into every process", true
	case strings.HasPrefix(n, "BASH_FUNC_"):
		return "bash imports it as a function", true
	case strings.HasPrefix(n, "DYLD_"):
		return "the dynamic linker acts on it", true
	}
	return "", false
}

// Variables that load code, run a program or send credentials, inside the families a node
// operator may otherwise allow (TRITON_*, NCCL_*, HF_*...). They are refused unless the
// node's allowed_env names the variable exactly: a glob never allows one, so an operator
// who allows "TRITON_*" for TRITON_CACHE_DIR does not also allow TRITON_CACHE_MANAGER.
// docs/security.md lists each with the upstream source that reads it.
var codeLoadingEnv = map[string]string{
	"CUDA_INJECTION64_PATH":               "the CUDA driver loads the library it names into every CUDA process",
	"CUDA_INJECTION32_PATH":               "the CUDA driver loads the library it names into every CUDA process",
	"VLLM_NCCL_SO_PATH":                   "vLLM loads the library it names as NCCL",
	"VLLM_RUST_FRONTEND_PATH":             "vLLM runs the program it names as its HTTP front end (with VLLM_USE_RUST_FRONTEND=1)",
	"VLLM_SERVER_DEV_MODE":                "vLLM's API server then serves its development endpoints, which act on the engine without the API key's scope",
	"VLLM_ALLOW_INSECURE_SERIALIZATION":   "vLLM then unpickles what its processes send each other (pickle runs code)",
	"TRITON_CACHE_MANAGER":                "Triton imports the module:class it names",
	"TRITON_REMOTE_CACHE_BACKEND":         "Triton imports the module:class it names",
	"TRITON_OVERRIDE_DIR":                 "Triton loads kernels from it instead of those it compiles",
	"TRITON_LIBCUDA_PATH":                 "Triton loads libcuda from the directory it names",
	"TRITON_PTXAS_PATH":                   "Triton runs the program it names as ptxas",
	"TRITON_PTXAS_BLACKWELL_PATH":         "Triton runs the program it names as ptxas",
	"TRITON_CUOBJDUMP_PATH":               "Triton runs the program it names as cuobjdump",
	"TRITON_NVDISASM_PATH":                "Triton runs the program it names as nvdisasm",
	"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "TorchInductor then loads compiled code from a remote cache",
	"TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE": "TorchInductor then loads autotuning results from a remote cache",
	"TORCHINDUCTOR_REDIS_HOST":            "names the remote cache TorchInductor loads compiled code from",
	"TORCHINDUCTOR_REDIS_PORT":            "names the remote cache TorchInductor loads compiled code from",
	"UCX_GDB_COMMAND":                     "UCX runs it as a debugger on an error (with UCX_HANDLE_ERRORS=debug)",
	"UCX_HANDLE_ERRORS":                   "set to debug, UCX runs UCX_GDB_COMMAND on an error",
	"OMP_TOOL_LIBRARIES":                  "the OpenMP runtime loads the tool libraries it names",
	"HF_ENDPOINT":                         "the Hugging Face libraries send HF_TOKEN to the URL it names",
}

// CodeLoadingEnv says whether a variable loads code, runs a program or sends a credential
// somewhere the spec's author chooses, and why; a node allows it only by naming it
// exactly in allowed_env. NVIDIA_* are all such: the NVIDIA Container Toolkit's hook reads
// them on the host, as root, to choose the devices and the host's driver files it mounts
// into the container.
func CodeLoadingEnv(name string) (string, bool) {
	n := strings.ToUpper(name)
	if why, ok := codeLoadingEnv[n]; ok {
		return why, true
	}
	if strings.HasPrefix(n, "NVIDIA_") {
		return "the NVIDIA Container Toolkit's hook reads it on the host, as root, to choose which devices and host driver files enter the container", true
	}
	return "", false
}
