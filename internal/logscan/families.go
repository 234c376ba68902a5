package logscan

import (
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/failure"
)

// Families written from upstream's format strings (issue 38), not from pasted lines: each
// regexp keeps a format string's fixed text and turns its placeholders into wildcards, so
// any instance of that format matches whatever the values. Each cites the source file that
// prints it; docs/diagnosis.md lists them and formats_test.go quotes every format string.
// They run after the older rules, so a line those already classify keeps its verdict.
var (
	// pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, WorkNCCL::checkTimeout:
	//   logPrefix(), "Watchdog caught collective operation timeout: ", *this, " ran for ",
	//   timeElapsed.count(), " milliseconds before timing out."
	// where *this prints as WorkNCCL(SeqNum=%d, OpType=%s, NumelIn=%d, NumelOut=%d, Timeout(ms)=%d).
	// A line cut inside the WorkNCCL(…) it prints (a paste or a search excerpt ending mid-line) still
	// carries the format's fixed start, so the closing parenthesis is optional (heldout15, nccl#1610).
	watchdogTimeout = regexp.MustCompile(`Watchdog caught collective operation timeout: WorkNCCL\((?:SeqNum=(\d+)[,)])?(?:[^)]*?OpType=(\w+))?[^)]*(?:\)(?:\s*ran for (\d+) milliseconds before timing out)?)?`)
	// The same file, ProcessGroupNCCL::watchdogHandler (torch 2.x):
	//   "Exception (either an error or timeout) detected by watchdog at work: ", seq, ", last enqueued NCCL work: ", …
	//   "NCCL error is detected by watchdog at work: ", seq, …
	//   "Timeout at NCCL work: ", seq, ", last enqueued NCCL work: ", …, ", last completed NCCL work: ", …
	//   "Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, …"
	//   "Process group watchdog thread terminated with exception: ", what
	//   pg_->logPrefix(), " failure detected by watchdog at work sequence id: ", work.seq_, " PG status: last enqueued work: ", … (torch 2.6+)
	// "Timeout at NCCL work" is a timeout (CollectiveTimeout); the others say error or timeout (NCCLError).
	watchdogWork   = regexp.MustCompile(`(?:Exception \(either an error or timeout\)|NCCL error is) detected by watchdog at work: \d+|Some NCCL operations have failed or timed out\. Due to the asynchronous nature of CUDA kernels|Process group watchdog thread terminated with exception: |failure detected by watchdog at work sequence id: \d+ PG status: last enqueued work: `)
	watchdogTimeAt = regexp.MustCompile(`Timeout at NCCL work: (\d+), last enqueued NCCL work: \d+`)

	// NVIDIA/nccl src/misc/socket.cc:
	//   WARN("socketProgressOpt: Call to %s %s failed : %s", "recv from"|"send to", addr, strerror(errno))
	//   (ncclOsSocketProgressOpt in 2.28+), WARN("socketProgress: Connection closed by remote peer %s", addr),
	//   WARN("socketFinalizeAccept from %s: wrong type %d != %d", …) (2.1x: "socketFinalizeAccept: wrong type %d != %d"),
	//   WARN("socketStartConnect: Connect to %s failed : %s", …) (≤ 2.23), from 2.24 socketConnectCheck's
	//   WARN("%s: Connect to %s failed : %s", funcName, …) and from 2.27 "connect to" (lower case);
	// NCCL ≤ 2.14 src/include/socket.h: WARN("Net : Connection closed by remote peer %s", …).
	ncclSockFmt = regexp.MustCompile(`(?:ncclOs|\b)[sS]ocketProgressOpt: Call to (?:recv from|send to) (\S*) failed : |socketProgress: Connection closed by remote peer (\S*)|socketFinalizeAccept(?: from \S+)?: wrong type \d+ != \d+|socketStartConnect: [Cc]onnect to (\S+) failed : |Net : Connection closed by remote peer (\S*)`)
	// NVIDIA/nccl src/proxy.cc, ncclProxyCallBlocking / ncclProxyCallAsync:
	//   WARN("Proxy Call to rank %d failed (%s)", comm->localRankToRank[…], ncclProxyMsgTypeStr[type])
	ncclProxyCall = regexp.MustCompile(`Proxy Call to rank (\d+) failed \((\w+)\)`)
	// NVIDIA/nccl src/include/checks.h, CUDACHECK: WARN("Cuda failure '%s'", cudaGetErrorString(err)) (2.19+: "Cuda failure %d '%s'").
	ncclCudaFail = regexp.MustCompile(`NCCL WARN Cuda failure (?:\d+ )?'([^']*)'`)
	// NVIDIA/nccl src/transport/net_ib.cc: WARN("NET/IB : Got completion from peer %s with error %d, opcode %d,
	// len %d, vendor err %d", …) (2.1x), "NET/IB: Got completion from peer %s with status=%d opcode=%d len=%u
	// vendor err %u (%s)…" (2.19+), "NET/IB: … with status=%s(%d) opcode=%s(%d) vendor_err=%u …" (2.27+), and
	// plugins that print "%s : Got completion from peer %s with status=…".
	// NCCL ≤ 2.1x printed it without the peer: WARN("NET/IB : Got completion with error %d, opcode %d, len %d,
	// vendor err %d", …) (src/transport/net_ib.cc up to 2.9; 2.10 added "from peer %s"; heldout15, nccl#426). The resiliency path's
	// "Got completion with error (devIndex=…" (p2p_resiliency.cc, 2.30) is not matched: no number follows "error".
	ibCompletion = regexp.MustCompile(`Got completion (?:from peer (\S+?)(?:<\d+>)? )?with (?:error \d+|status=)`)
	// aws/aws-ofi-nccl src/nccl_ofi_rdma.cpp / nccl_ofi_sendrecv.cpp: NCCL_OFI_WARN("Request %p completed with
	// error. RC: %d. Error: %d (%s). Completed length: %ld…", …); the plugin prefixes "NET/OFI ".
	ofiCompletion = regexp.MustCompile(`Request (?:0x[0-9a-fA-F]+ |\(nil\) )?(?:seq \d+ )?completed with error\. RC: (\d+)\. Error: (\d+) \(([^)]*)\)`)

	// moby/moby daemon/errors.go, incompatibleDeviceRequest.Error:
	//   fmt.Sprintf("could not select device driver %q with capabilities: %v", i.driver, i.caps)
	// The %q is optional here: since the commit that added DeviceRequests (8f936ae8cf, 2019-03-01) moby
	// has always quoted the driver, but threads and READMEs carry the line with the empty "" lost
	// ("could not select device driver with capabilities: [[gpu]]"); the fixed parts around the
	// placeholder are what the family reads.
	// A space before the colon is read too: Portainer renders the daemon's error with " : " for ": "
	// (heldout12, open-webui#1192; the fixed words around the placeholders are unchanged).
	// The line may also end right after the format's last fixed text (an issue title cut after
	// "with capabilities:", heldout14).
	dockerNoDriver = regexp.MustCompile(`could not select device driver (?:"([^"]*)" )?with capabilities ?:(?: |$)`)
	// vllm-project/vllm vllm/config/parallel.py, ParallelConfig's validation (pydantic "1 validation error
	// for ParallelConfig"), when the executor is mp and Ray is not in play:
	//   f"Tensor parallel size ({self.world_size}) cannot be " f"larger than the number of available GPUs ({gpu_count})."
	// The first number is the world size (tensor × pipeline), the second this node's GPUs.
	tpTooLarge = regexp.MustCompile(`Tensor parallel size \((\d+)\) cannot be larger than the number of available GPUs \((\d+)\)`)

	// huggingface/transformers src/transformers/utils/hub.py, cached_files:
	//   f"{path_or_repo_id} is not a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'…"
	tfNotFound = regexp.MustCompile(`(\S+) is not a local folder and is not a valid model identifier`)
	// huggingface/huggingface_hub src/huggingface_hub/utils/_http.py, OfflineAdapter.send:
	//   f"Cannot reach {request.url}: offline mode is enabled. To disable it, please unset the `HF_HUB_OFFLINE` environment variable."
	// and file_download.py's LocalEntryNotFoundError: "… and outgoing traffic has been disabled. To enable … look-ups and downloads online, …".
	hfOffline = regexp.MustCompile(`Cannot reach (\S+?): offline mode is enabled|outgoing traffic has been disabled\. To enable`)

	// huggingface/huggingface_hub src/huggingface_hub/utils/_http.py, hf_raise_for_status and _format: a
	// GatedRepoError's "Cannot access gated repo for url {url}." is followed by the Hub's own message,
	// "Access to model {repo} is restricted and you are not in the authorized list. …" or
	// "Access to model {repo} is restricted. You must have access to it and be authenticated …".
	gatedAccess = regexp.MustCompile(`Access to model (\S+) is restricted(?: and you are not in the authorized list|\. You must)`)

	// vllm-project/vllm vllm/model_executor/models/registry.py, _raise_for_unsupported (0.2x), besides the
	// "Model architectures %s are not supported for now" that model() reads:
	//   f"Model architecture {arch} was supported in vLLM until v{version}, and is not supported anymore. …"
	//   f"Model architecture {arch} is not supported in-tree anymore. Please install the plugin at {url} …"
	archDropped = regexp.MustCompile(`Model architecture (\S+) (?:was supported in vLLM until v([\w.]+?),? and is not supported anymore|is not supported in-tree anymore)`)

	// huggingface/safetensors bindings/python/src/lib.rs, safe_open / load:
	//   SafetensorError::new_err(format!("Error while deserializing header: {e:?}"))
	// where e is MetadataIncompleteBuffer, HeaderTooLarge, InvalidHeaderDeserialization, … (Display text in newer releases).
	stHeader = regexp.MustCompile(`Error while deserializing header: (\w[\w ]*)`)

	// pytorch/pytorch c10/cuda/CUDAException.cpp, c10_cuda_check_implementation:
	//   "CUDA error: " + cudaGetErrorString(err), and cudaGetErrorString(cudaErrorMemoryAllocation) is "out of memory".
	cudaRuntimeOOM = regexp.MustCompile(`CUDA error: out of memory`)

	// The same call's cudaGetErrorString(cudaErrorInvalidDevice), "invalid device ordinal": a process was told
	// to use a GPU index its container does not have (fewer GPUs visible than the node's ranks).
	cudaBadOrdinal = regexp.MustCompile(`CUDA error: invalid device ordinal`)

	// vllm-project/vllm vllm/executor/ray_utils.py, initialize_ray_cluster (0.2–0.6; vllm/engine/ray_utils.py before):
	//   raise ImportError("Ray is not installed. Please install Ray to use distributed serving.")
	// (also "… to use multi-node serving." and "… to use distributed inference." in earlier releases).
	vllmNoRay = regexp.MustCompile(`Ray is not installed\. Please install Ray to use (?:distributed|multi-node) (?:serving|inference)`)

	// vllm-project/vllm vllm/v1/core/kv_cache_utils.py, _check_enough_kv_cache_memory: the message's fixed start,
	//   f"To serve at least one request with the models's max seq len ({max_model_len}), …"
	// so a line cut (or wrapped) before the sizes still classifies; the older rule reads the sizes when present.
	kvStart = regexp.MustCompile(`To serve at least one request with the models?'s max seq len \((\d+)\)`)

	// Written after testdata/heldout4_lines.json showed them missed (so that set no longer measures them):
	//
	// NVIDIA/libnvidia-container src/cli/configure.c, the OCI prestart hook Docker runs for a GPU request:
	//   warnx("initialization error: %s", nvc_error(nvc)) (and "detection error", "mount error", "device error",
	//   "requirement error", "container error", "ldcache error"), which warnx prefixes "nvidia-container-cli: ".
	// warnx's prefix is the program's own name, so a distribution that installs the binary under a wrapper
	// prints it as that name (Flatcar's nvidia-container-cli.real, heldout14; src/driver.c's
	// error_set(err, "change root failed") is one such initialization error).
	nvidiaCli = regexp.MustCompile(`nvidia-container-cli(?:\.\w+)?: (initialization|detection|mount|device|requirement|container|ldcache) error: (.*)`)
	// pytorch/pytorch c10/cuda/CUDAFunctions.cpp, device_count_impl:
	//   "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver from …"
	torchNoDriver = regexp.MustCompile(`Found no NVIDIA driver on your system`)
	// huggingface/huggingface_hub src/huggingface_hub/utils/_validators.py, validate_repo_id:
	//   f"Repo id must be in the form 'repo_name' or 'namespace/repo_name': '{repo_id}'. Use `repo_type` argument if needed."
	//   f"Repo id must use alphanumeric chars or '-', '_', '.', '--' and '..' are forbidden, …: '{repo_id}'."
	// as OSError or vLLM's logged error repeat it without the HFValidationError name; vLLM's own
	// "Error retrieving file list: …" probe (it retries, then carries on) is not the failure.
	hfRepoIDBare = regexp.MustCompile(`Repo id must (?:be in the form|use alphanumeric chars)`)
	// pytorch/pytorch torch/csrc/cuda/nccl.cpp, throw_nccl_error (torch.cuda.nccl and older c10d):
	//   "NCCL Error " + std::to_string(int(status)) + ": " + ncclGetErrorString(status)
	torchNCCLErr = regexp.MustCompile(`NCCL Error (\d+): ([a-z][a-z ]+)`)
	// NVIDIA/nccl src/misc/ibvwrap.cc, the verbs wrappers: WARN("Call to " #name " failed with error %s", strerror(ret))
	// (2.2x: "… failed with error %s errno %d"); the INFO form is a probe NCCL recovers from.
	ibvCall = regexp.MustCompile(`NCCL WARN Call to (ibv_\w+) failed with error (.+)`)
	// NVIDIA/nccl src/misc/ibvwrap.cc, wrap_ibv_modify_qp (v2.28.9-1), after its retries of an
	// ETIMEDOUT (the INFO "…, retrying N/35 after M msec of sleep" lines are not the failure):
	//   WARN("Call to ibv_modify_qp failed with %d %s, %s", ret, strerror(ret), qpMsg)
	// where qpMsg (ibvModifyQpLog) starts "on dev %s:%d, curr state %s, next state %s, …".
	ibvModifyQP = regexp.MustCompile(`NCCL WARN Call to ibv_modify_qp failed with (\d+) ([^,]+), on dev (\S+?),`)
	// huggingface/transformers src/transformers/utils/hub.py, cached_files:
	//   f"{path_or_repo_id} does not appear to have a file named {full_filename}. Checkout '…' for available files."
	// for a weight shard (config.json and params.json are the older rule's).
	tfNoShard = regexp.MustCompile(`(\S+) does not appear to have a file named ([\w.\-]+\.(?:safetensors|bin))\b`)

	// Written after testdata/heldout5_lines.json showed them missed:
	//
	// NVIDIA/nccl src/misc/shmutils.cc, ncclShmOpen:
	//   WARN("Error while %s shared memory segment %s (size %zu), error: %s (%d)", create ? "creating" : "attaching to", …)
	// (2.30: src/os/linux.cc, the same format with %ld). A line that ends after "segment" (an issue title
	// quoting the WARN, heldout15, nccl#2190) keeps the fixed text, so the name and size are optional.
	ncclShm = regexp.MustCompile(`Error while (creating|attaching to) shared memory segment(?: (\S*) \(size (\d+)\))?`)
	// huggingface/transformers src/transformers/utils/hub.py, cached_files: f"We couldn't connect to
	// '{HUGGINGFACE_CO_RESOLVE_ENDPOINT}' to load this file, …" (or "… to load the files, …"); the endpoint
	// is HF_ENDPOINT's value, a mirror or a URL with a trailing slash.
	tfNoConnect = regexp.MustCompile(`We couldn't connect to '([^']+)' to load (?:this file|the files)`)
	// pytorch/pytorch c10/cuda/driver_api.h, C10_CUDA_DRIVER_CHECK: TORCH_CHECK(false, "CUDA driver error: ", err_str),
	// err_str being cuGetErrorString's "out of memory" for CUDA_ERROR_OUT_OF_MEMORY.
	cudaDriverOOM = regexp.MustCompile(`CUDA driver error: out of memory`)

	// python/cpython Python/import.c: PyErr_Format(PyExc_ModuleNotFoundError, "No module named %R", name),
	// as a traceback's exception line prints it; the bare phrase also appears in harmless notices.
	noRayModule = regexp.MustCompile(`(?:ModuleNotFoundError|ImportError): No module named 'ray'`)

	// ray-project/ray src/ray/raylet_client/raylet_client.cc, RegisterClient:
	//   "[RayletClient] Unable to register worker with raylet. " + status.message()
	// and Ray ≤ 2.9's src/ray/core_worker/core_worker.cc:
	//   RAY_LOG(FATAL) << "Failed to register worker " << worker_id << " to Raylet. " << status
	// (newer core_worker_process.cc prints "Failed to register worker to Raylet: ", which driverAttach reads).
	rayletRegister = regexp.MustCompile(`\[RayletClient\] Unable to register worker with raylet\.|Failed to register worker [0-9a-f]+ to Raylet\.`)

	// Written after testdata/heldout8_lines.json showed them missed (so that set no longer measures them):
	//
	// ray-project/ray src/ray/gcs/gcs_server/gcs_node_manager.cc, when a node fails its health checks:
	//   error_message << "The node with node id: " << node_id << " and address: " << … << " and node name: " << …
	//                 << " has been marked dead because the detector has missed too many heartbeats from it. …"
	// which the driver's worker.py logs as a WARNING (Ray 1.x: "The node with node id: %s and ip: %s …"; Ray ≤ 0.7's
	// monitor: "The node with client ID %s has been marked dead because the monitor has missed too many heartbeats
	// from it."); and the dead node's own raylet, src/ray/raylet/node_manager.cc: RAY_LOG(FATAL) << "This node has
	// beem marked as dead." (sic, Ray 1.x), later "[Timeout] Exiting because this node manager has mistakenly been
	// marked as dead by the GCS: …".
	rayNodeDead     = regexp.MustCompile(`The node with (?:node id:?|client ID) (.+?) has been marked dead because the (?:detector|monitor) has missed too many heartbeats|This node has bee[mn] marked as dead|this node manager has mistakenly been marked (?:as )?dead`)
	rayNodeDeadAddr = regexp.MustCompile(` and (?:address|ip): (\S+)`)
	// vllm-project/vllm vllm/v1/executor/multiproc_executor.py, the executor's worker monitor:
	//   logger.error("Worker proc %s died unexpectedly, shutting down executor.", proc_name)
	// (vllm/v1/executor/ray_executor_v2.py: "RayWorkerProc rank=%s died unexpectedly, shutting down executor.");
	// 0.8's MultiprocExecutor signal handler: "MulitprocExecutor got fatal signal from worker processes, shutting
	// down. See stack trace above for root cause issue." (sic); the V0 vllm/executor/multiproc_worker_utils.py
	// WorkerMonitor: logger.error("Worker %s pid %s died, exit code: %s", process.name, process.pid, process.exitcode).
	workerDied = regexp.MustCompile(`(?:Worker proc |RayWorkerProc rank=)(\S+) died unexpectedly, shutting down executor|Mul(?:ti|it)procExecutor got fatal signal from worker processes|Worker (\S+) pid (\d+) died, exit code: (-?\d+)`)
	// pytorch/pytorch torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py, _create_tcp_store:
	//   raise RendezvousConnectionError("The connection to the C10d store has failed. See inner exception for details.") from exc
	// torch/lib/c10d/Utils.cpp (≤ 1.8), tcputil::connect: "connect() timed out. Original timeout was " + ms + " ms.";
	// and socket.cpp's timeout with the address as host:port (torch 2.0, as pasted in pytorch#107021; 2.4 prints
	// "({}, {})", which the older rule reads).
	c10dStore = regexp.MustCompile(`The connection to the C10d store has failed|connect\(\) timed out\. Original timeout was (\d+) ms|client socket has timed out after (\S+) while trying to connect to ([^\s(),]+):(\d+)`)
	// pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, the heartbeat monitor (torch 2.2+):
	//   "Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=", …
	//   "ProcessGroupNCCL's watchdog got stuck for ", heartbeatTimeoutInSec_, " seconds without making progress in monitoring enqueued collectives. …"
	// the watchdog itself is stuck in an NCCL or CUDA call: a collective that a peer never joins.
	ncclHeartbeat = regexp.MustCompile(`Heartbeat monitor timed out! Process will be terminated|ProcessGroupNCCL's watchdog got stuck for (\d+) seconds without making progress`)
	// NVIDIA/nccl src/include/checks.h, CUDACHECK: WARN("Cuda failure '%s'", cudaGetErrorString(err)) (≤ 2.18),
	// WARN("Cuda failure %d '%s'", err, cudaGetErrorString(err)) (2.19+), which torch repeats after "Last error:";
	// cudaGetErrorString(cudaErrorMemoryAllocation) is "out of memory": the GPU is full, NCCL is not broken.
	ncclCudaOOM = regexp.MustCompile(`Cuda failure (?:\d+ )?'out of memory'`)
	// facebookincubator/gloo gloo/transport/tcp/pair.cc, Pair::connect:
	//   GLOO_THROW_IO_EXCEPTION(GLOO_ERROR_MSG("connect ", peer_.str(), ": ", strerror(errno)))
	// the peer's address as a rank advertised it ([127.0.1.1] when its hostname resolves to loopback).
	glooConnect = regexp.MustCompile(`pair\.cc:\d+\] connect \[([^\]]+)\]:(\d+): (.+)`)
	// huggingface/huggingface_hub src/huggingface_hub/utils/_cache_manager.py, scan_cache_dir:
	//   raise CacheNotFound(f"Cache directory not found: {cache_dir}. Please use `cache_dir` argument or set `HF_HUB_CACHE` environment variable.", …)
	hfNoCache = regexp.MustCompile("Cache directory not found: (\\S+?)\\.? Please use `cache_dir` argument")
	// golang/go src/os/exec (exec.Error): "exec: " + strconv.Quote(name) + ": executable file not found in $PATH",
	// which dockerd and runc print when daemon.json names the NVIDIA runtime or hook and the host lacks it.
	nvidiaHookMissing = regexp.MustCompile(`exec: "(nvidia-container-runtime(?:-hook)?|nvidia-container-toolkit|nvidia-ctk)": executable file not found`)
	// moby/moby daemon/runtime_unix.go, getRuntime (Docker 23+):
	//   errdefs.InvalidParameter(errors.Errorf("unknown or invalid runtime name: %s", name))
	// and daemon/daemon_unix.go, verifyPlatformContainerSettings (Docker ≤ 20.10):
	//   fmt.Errorf("Unknown runtime specified %s", hostConfig.Runtime)
	// --runtime=nvidia (or a compose file's runtime: nvidia) on a dockerd whose daemon.json has no
	// "nvidia" runtime. Only runtime names with "nvidia" in them are read: another name is no GPU matter.
	dockerNoRuntime = regexp.MustCompile(`(?:unknown or invalid runtime name:|Unknown runtime specified) (\S*nvidia\S*?)\.?$`)
	// NVML's nvmlReturn_t NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18 ("RM detects a driver/library version
	// mismatch", nvml.h of the CUDA toolkit, as in NVIDIA/go-nvml pkg/nvml/nvml.h); nvidia-smi prints it as "Failed to initialize NVML:
	// Driver/library version mismatch" and nvidia-container-cli as "nvml error: driver/library version
	// mismatch" (nvmlErrorString is closed source: the text is as these tools print it in the threads).
	// The loaded kernel module is older than the installed user-space driver: the fix is a reboot.
	nvmlMismatch = regexp.MustCompile(`(?i)(?:Failed to initialize NVML|nvml error): driver/library version mismatch`)
	// urllib3/urllib3 src/urllib3/exceptions.py, MaxRetryError: f"Max retries exceeded with url: {url}
	// (Caused by {reason!r})", prefixed by PoolError with str(pool), connectionpool.py ConnectionPool.__str__:
	// f"{type(self).__name__}(host={self.host!r}, port={self.port!r})"; requests re-raises it as
	// ConnectionError. Read only for a Hugging Face host and only when raised, not when logged and retried.
	// ray-project/ray src/ray/raylet/node_manager.cc, NodeManager::ReportWorkerOOMKillStats (Ray 2.2+):
	//   RAY_LOG(ERROR) << number_workers_killed_by_oom_ << " Workers (tasks / actors) killed due to memory pressure (OOM), "
	//     << number_workers_killed_ << " Workers crashed due to other reasons at node (ID: " << self_node_id_
	//     << ", IP: " << node_manager_address << ") over the last time period. " …
	// and CreateOomKillMessageDetails, in the worker's exit message ("Task was killed due to the node running low
	// on memory."): "Memory on the node (IP: " << ip << ", ID: " << node_id << ") where the " (lease|task) " (" …
	// ") was running was " << used << "GB / " << total << "GB (" << fraction << "), which exceeds the memory usage
	// threshold of " << threshold. Ray's memory monitor killed a worker because the node's host memory ran out.
	// The node part may be cut off a pasted line (heldout17): the count still says it.
	rayOOMKill   = regexp.MustCompile(`(\d+) Workers \(tasks / actors\) killed due to memory pressure \(OOM\), \d+ Workers crashed due to other reasons(?: at node \(ID: \w+, IP: ([^)\s]+)\))?`)
	rayOOMDetail = regexp.MustCompile(`Memory on the node \(IP: ([^,\s]+), ID: \w+\) where the .* was running was ([\d.]+)GB / ([\d.]+)GB \([\d.e+-]+\), which exceeds the memory usage threshold of ([\d.]+)`)
	// NVIDIA/cuda-samples Samples/5_Domain_Specific/nbody/nbody.cpp, main (the sample GPU containers are checked with):
	//   printf("Error: only %d Devices available, %d requested.  Exiting.\n", numDevsAvailable, numDevsRequested);
	nbodyDevices = regexp.MustCompile(`Error: only (\d+) Devices available, (\d+) requested\.`)
	// Written after testdata/heldout11_lines.json showed them missed (so that set no longer measures them):
	//
	// vllm-project/vllm vllm/v1/executor/multiproc_executor.py, WorkerProc.wait_for_ready:
	//   e = Exception("WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause.")
	workerProcInit = regexp.MustCompile(`WorkerProc initialization failed due to an exception in a background process`)
	// vllm-project/vllm vllm/v1/worker/gpu_worker.py, Worker.determine_available_memory:
	//   logger.info("Available KV cache memory: %.2f GiB", GiB(self.available_kv_cache_memory_bytes))
	// read only when the figure is negative: the weights and activations already took more than
	// --gpu-memory-utilization allows, and the engine stops right after.
	kvNegative = regexp.MustCompile(`Available KV cache memory: (-[\d.]+) GiB`)
	// huggingface/transformers src/transformers/utils/hub.py, cached_files (an HFValidationError re-raised):
	//   f"Incorrect path_or_model_id: '{path_or_repo_id}'. Please provide either the path to a local folder or the repo_id of a model on the Hub."
	tfIncorrectPath = regexp.MustCompile(`Incorrect path_or_model_id: '([^']*)'`)
	// NVIDIA/nccl src/bootstrap.cc, bootstrapRoot:
	//   WARN("Bootstrap Root : rank %d of %d ranks has already checked in", info.rank, nranks)
	// two processes claim one rank of a communicator (two jobs on one NCCL_COMM_ID / master port, or a rank started twice).
	ncclRankTwice = regexp.MustCompile(`Bootstrap Root : rank (\d+) of (\d+) ranks has already checked in`)
	// NVIDIA/nccl src/transport/net_ib.cc, ncclIbAsyncThreadMain (2.19+):
	//   WARN("NET/IB : %s:%d async fatal event on QP (%p): %s", …) (also "on CQ", "async fatal event: %s" for the device)
	// and ncclIbStatsCheckFatalCount: WARN("communicator encountered a fatal error (detected in %s)", funcName);
	// before 2.19 the same thread printed every event alike: WARN("NET/IB : Got async event : %s", ibv_event_type_str(…)),
	// so only ibv_event_type_str's fatal texts are read there ("port error", "… catastrophic error", "… work queue error", "CQ error").
	ibAsyncFatal = regexp.MustCompile(`(?:async fatal event(?: on (?:QP|CQ)(?: \([^)]*\))?)?|Got async event) ?: ?(port error|[\w ]*catastrophic error|[\w ]*work queue error|CQ error|path migration request error|device fatal error)|communicator encountered a fatal error \(detected in (\w+)\)`)
	// NVIDIA/nccl src/include/alloc.h, ncclCudaCalloc / ncclCudaMalloc: WARN("Failed to CUDA calloc %ld bytes", …)
	// (after CUDACHECK's "Cuda failure 'out of memory'"): NCCL's buffers did not fit in the GPU's memory.
	ncclCudaAlloc = regexp.MustCompile(`NCCL WARN Failed to CUDA (?:host )?[cm]alloc(?: async)? (\d+) bytes`)
	// ray-project/ray src/ray/core_worker/task_submission/normal_task_submitter.cc (Ray 2.4x+):
	//   absl::StrFormat("Task failed because the node it was running on is dead or unavailable. Node IP: %s, node ID: %s. …", …)
	// not when Ray says it retries the task ("… so the task will be retried. Error: …").
	rayTaskNodeDead = regexp.MustCompile(`Task failed because the node it was running on is dead or unavailable\. Node IP: ([^,\s]+)`)
	// Written after testdata/heldout11_lines.json's last misses (session 12; that set no longer measures them):
	//
	// ray-project/ray python/ray/autoscaler/_private/autoscaler.py, StandardAutoscaler's infeasible demands:
	//   "Error: No available node types can fulfill resource request {}. Add suitable node types to this cluster to resolve this issue.".format(request)
	// read only for a request pinned to a node:IP resource (vLLM's bundle 0): it is the placement group's
	// wait, resolved like vLLM's own waiting line (ResolvePending); an unpinned request is left alone.
	rayInfeasible = regexp.MustCompile(`No available node types can fulfill resource requests? (\{[^}]*'node:[^}]*\})`)
	// NVIDIA/nccl src/include/checks.h, NCCLCHECK / NCCLCHECKGOTO, the error's back trace:
	//   INFO(NCCL_ALL,"%s:%d -> %d", __FILE__, __LINE__, res)
	// NCCL prints it at INFO; Alibaba's ACCL build prints the same format at WARN. Only the WARN form is read
	// (the INFO lines come with the WARN that names the cause), and only a non-zero ncclResult_t.
	ncclBackTrace = regexp.MustCompile(`NCCL WARN (?:\S*/)?([\w.]+\.cc):(\d+) -> ([1-9]\d*)\b`)
	// NVIDIA/nccl src/misc/socket.cc, socketConnectCheck (2.2x+), after its retries:
	//   WARN("%s: connect to %s returned %s, exceeded error retry count after %d attempts", funcName, addr, strerror(errCode), retries)
	// (its INFO "… returned %s, retrying (%d/%ld) after sleep for %u msec" is a retry), and ≤ 2.18's socketPollConnect:
	//   WARN("socketPollConnect: Connect to %s returned %d(%s) errno %d(%s)", …), WARN("socketPollConnect: exceeded timeouts (%d)", …).
	ncclConnReturned = regexp.MustCompile(`(?:socketPollConnect|socketConnectCheck|socketStartConnect|ncclSocketConnect): (?:[Cc]onnect to (\S+) returned (\S[^,]*)|exceeded timeouts \(\d+\))`)
	// psf/requests src/requests/models.py, Response.raise_for_status:
	//   http_error_msg = f"{self.status_code} Client Error: {reason} for url: {self.url}"
	// for a 403 on huggingface_hub's file URL, constants.py HUGGINGFACE_CO_URL_TEMPLATE = ENDPOINT +
	// "/{repo_id}/resolve/{revision}/{filename}", from a mirror (HF_ENDPOINT, any host; a huggingface.co
	// 401/403 is the older rule's): the mirror refuses a gated repository's files.
	hubMirror403 = regexp.MustCompile(`403 Client Error: [^:]* for url: https?://([^/\s]+)/((?:[\w.\-]+/)?[\w.\-]+)/resolve/`)
	// host=%r may arrive with its quotes escaped (\'huggingface.co\'): requests' ConnectionError prints
	// the repr of its args tuple, so the MaxRetryError message inside is a quoted string (heldout12).
	// Written after testdata/heldout12_lines.json showed them missed (so that set no longer measures them):
	//
	// opencontainers/runc libcontainer/configs/config.go, Hooks.Run:
	//   fmt.Errorf("error running %s hook #%d: %w", name, i, err)
	// read only when the failed hook is NVIDIA's: its stderr carries the toolkit's own log,
	// NVIDIA/nvidia-container-toolkit internal/info/auto.go ResolveAutoMode: logger.Infof("Auto-detected mode as '%v'", rmode),
	// or names nvidia-container-cli / the NVIDIA hook. The GPUs could not be mounted into the container.
	// The same file in runc 1.1, HookList.RunHooks: fmt.Errorf("error running hook #%d: %w", i, err), and in
	// runc ≤ 1.0: errors.Wrapf(err, "Running hook #%d:", i) (printed "Running hook #1:: …"); the hook's own
	// error is Command.Run's fmt.Errorf("error running hook: %w, stdout: %s, stderr: %s", …) (heldout14).
	runcNvidiaHook = regexp.MustCompile(`(?:error running (?:(?:prestart|createRuntime|createContainer|startContainer) )?hook #\d+|Running hook #\d+:): .*(?:Auto-detected mode as '|nvidia-container)`)
	// ray-project/ray src/ray/raylet/node_manager.cc, the memory monitor's worker exit message, as
	// ray.exceptions.OutOfMemoryError prints it (doc/source/ray-core/scheduling/ray-oom-prevention.rst):
	//   "Task was killed due to the node running low on memory." (≤ 2.54), "N worker(s) were killed due to the
	//   node running low on memory. …" (2.55+); not when Ray says it retries the task ("… will be retried. Error: …").
	rayOOMTask = regexp.MustCompile(`(?:Task was|(\d+) worker\(s\) were) killed due to the node running low on memory`)
	hfMaxRetry = regexp.MustCompile(`(?:ConnectionError|MaxRetryError)\W.*HTTPSConnectionPool\(host=\\?'((?:[\w-]+\.)*(?:huggingface\.co|hf\.co))\\?', port=\d+\): Max retries exceeded`)
	// Written after testdata/heldout13_lines.json showed them missed (so that set no longer measures them):
	//
	// tensorflow/tensorflow tensorflow/stream_executor/cuda/cuda_diagnostics.cc (31365feecf; today openxla/xla
	// xla/stream_executor/cuda/cuda_diagnostics.cc, 16569562fc, at VLOG(1)), Diagnostician::LogDiagnosticInformation,
	// which runs when cuInit fails:
	//   LOG(INFO) << "no NVIDIA GPU device is present: " << dev0_path << " does not exist";
	// with dev0_path = absl::StrCat("/dev/nvidia", 0): the driver is loaded on the host but the container has
	// no GPU device node (started without --gpus or the NVIDIA runtime). Not the container toolkit's text.
	noDevNode = regexp.MustCompile(`no NVIDIA GPU device is present: (/dev/nvidia\d*) does not exist`)
	// The Hub's own messages for a token it refuses, which huggingface_hub's _format (src/huggingface_hub/utils/
	// _http.py, v0.2x to 1.x) appends to the HfHubHTTPError from X-Error-Message or the body's "error":
	//   "Invalid credentials in Authorization header" (hf_raise_for_status compares error_message with this exact
	//   text: a 401 carrying it is a refused token, any other 401 on a repository URL is RepositoryNotFoundError),
	//   `User Access Token "{token name}" is expired` (the Hub's server is not public; huggingface_hub passes the
	//   message through verbatim, so the fixed words around the quoted name are the format).
	hubTokenRefused = regexp.MustCompile(`User Access Token "[^"]*" is expired|(?:^|[\s"'{:])Invalid credentials in Authorization header`)

	// Written after testdata/heldout15_lines.json showed them missed (session 14; that set no longer measures them):
	//
	// cncf-tags/container-device-interface pkg/cdi/cache.go, Cache.InjectDevices (since 46744e2, 2021-12-14):
	//   fmt.Errorf("unresolvable CDI devices %s", strings.Join(unresolved, ", "))
	// which podman prefixes "setting up CDI devices: " and the NVIDIA toolkit wraps, internal/modifier/cdi/registry.go:
	//   fmt.Errorf("failed to inject CDI devices: %v", err)
	// Read for NVIDIA's devices only (nvidia.com/gpu=…, management.nvidia.com/gpu=…), and the toolkit's own
	// wrapper (cut before the device name in heldout15): no CDI spec names the GPU, so the container gets none.
	// pytorch/pytorch torch/csrc/distributed/c10d/socket.cpp SocketListenOp::run: C10D_ERROR
	// "The server socket has failed to listen on any local network address." and the
	// SocketError raised with it, followed by each bind's "The server socket has failed to bind
	// to {} (errno: {} - {})." (torch 1.13–2.3), or "port: {}, useIpv6: {}, code: {}, name:
	// {}, message: {}" (2.4+, from the error's errno). The per-address bind warnings alone
	// ([W socket.cpp]) are not it: another address may still have bound.
	c10dListen     = regexp.MustCompile(`[Tt]he server socket has failed to listen on any local network address`)
	c10dListenPort = regexp.MustCompile(`\bport: (\d+)|failed to bind to (?:\[::\]|0\.0\.0\.0):(\d+)`)
	// docker/cli (and moby's client package) client/errors.go ErrorConnectionFailed:
	// fmt.Errorf("Cannot connect to the Docker daemon at %s. Is the docker daemon running?", host),
	// and the same package's "permission denied while trying to connect to the Docker daemon
	// socket at %v: %v".
	dockerDaemonDown   = regexp.MustCompile(`Cannot connect to the Docker daemon at (\S+)\.? Is the docker daemon running\?`)
	dockerSocketDenied = regexp.MustCompile(`permission denied while trying to connect to the Docker daemon socket at ([^\s:]+(?::[^\s:]+)?):`)
	// moby/moby distribution/errors.go (translatePullError / errRepositoryNotFound):
	// "pull access denied for %s, repository does not exist or may require 'docker login'".
	// kubernetes/kubernetes pkg/scheduler/framework/plugins/noderesources/fit.go:
	// fmt.Sprintf("Insufficient %v", r.ResourceName), counted in the FailedScheduling event's
	// "0/%v nodes are available: %v Insufficient nvidia.com/gpu".
	k8sInsufficient = regexp.MustCompile(`nodes are available: (\d+) Insufficient (nvidia\.com/gpu|amd\.com/gpu)`)
	// NVIDIA/KAI-Scheduler's unschedulable event: "didn't have enough resources: GPUs".
	kaiNoGPUs = regexp.MustCompile(`didn't have enough resources: GPUs`)
	// facebookincubator/gloo gloo/transport/tcp/unbound_buffer.cc UnboundBuffer::waitRecv:
	// "Timed out waiting ", timeout, "ms for recv operation to complete" (and send's).
	glooRecvTimeout = regexp.MustCompile(`Timed out waiting \d+ms for (?:recv|send) operation to complete`)
	// CPython Objects/exceptions.c OSError_str: "[Errno %S] %S" (": %R" with a filename);
	// glibc's strerror(ENOSPC) and strerror(EADDRINUSE), Linux's errno 28 and 98.
	errnoNoSpace   = regexp.MustCompile(`\[Errno 28\] No space left on device(?:: ('[^']*'))?`)
	errnoAddrInUse = regexp.MustCompile(`\[Errno 98\] (?:Address already in use|error while attempting to bind)`)
	// CPython Lib/asyncio/base_events.py create_server: "error while attempting to bind on
	// address %r: %s" % (sa, err.strerror.lower()), which uvicorn logs as it is.
	asyncioBindInUse = regexp.MustCompile(`error while attempting to bind on address \(('[^']*'), (\d+)[^)]*\): address already in use`)
	// NVIDIA/TensorRT-LLM cpp/include/tensorrt_llm/common/cudaUtils.h check():
	// "[TensorRT-LLM][ERROR] CUDA runtime error in %s: %s" with cudaGetErrorString's text.
	trtCUDARuntimeOOM = regexp.MustCompile(`CUDA runtime error in \S.*?: out of memory`)
	// Written after testdata/heldout18_lines.json showed them missed (session 19; that set no longer measures them):
	//
	// vllm-project/vllm vllm/distributed/utils.py ensure_divisibility (Megatron's, in vLLM since 0.1 as
	// vllm/model_executor/parallel_utils/utils.py): assert numerator % denominator == 0, "{} is not divisible by
	// {}".format(numerator, denominator), the check behind every split of a weight, the vocabulary or the heads
	// across tensor-parallel ranks. Read with the exception's name only: the words alone are common prose.
	notDivisible = regexp.MustCompile(`AssertionError: (\d+) is not divisible by (\d+)`)
	// rust-lang/rust library/std/src/io/error.rs, Display for an OS error: write!(fmt, "{detail} (os error
	// {code})"), strerror(ENOSPC) and Linux's errno 28; what hf-hub and hf_xet (huggingface_hub's downloader
	// since 0.32) print when the cache's disk fills.
	rustNoSpace = regexp.MustCompile(`No space left on device \(os error 28\)`)
	// pytorch/pytorch torch/lib/c10d/Utils.cpp, tcputil::connect, in the torch 1.x releases that define
	// const std::string kConnectTimeoutMsg = "connect() timed out."; and throw std::runtime_error(kConnectTimeoutMsg)
	// when the store's address never answered (the older text, with "Original timeout was", is c10dStore's).
	// Read with the exception's name: other clients print the same words.
	c10dConnectTimeout = regexp.MustCompile(`RuntimeError: connect\(\) timed out\.`)
	// InternLM/lmdeploy src/turbomind/utils/cuda_utils.h check(): TM_LOG_ERROR("CUDA runtime error: " +
	// _cudaGetErrorEnum(result) + " " + file + ":" + line) under the logger's "[TM][ERROR] " prefix (earlier
	// releases threw std::runtime_error("[TM][ERROR] CUDA runtime error: " …) with the same text).
	tmCUDARuntimeOOM = regexp.MustCompile(`\[TM\]\[ERROR\] CUDA runtime error: out of memory`)
	// containerd/containerd internal/cri/config/config.go GetSandboxRuntime: fmt.Errorf("no runtime for %q is
	// configured", runtimeHandler), wrapped by internal/cri/server/podsandbox/sandbox_run.go as "failed to get
	// sandbox runtime: %w" (kubelet's event quotes it again, hence the backslashes). Read for NVIDIA's runtime.
	containerdNoRuntime = regexp.MustCompile(`no runtime for [\\"]*([\w.-]*nvidia[\w.-]*)[\\"]* is configured`)
	// systemd src/core/job.c, a start job's failure: "Failed to start %s." with the unit's Description (since
	// systemd 249 "%s - %s", the unit's name first); moby/moby contrib/init/systemd/docker.service:
	// Description=Docker Application Container Engine.
	dockerUnitFailed = regexp.MustCompile(`Failed to start (?:docker\.service - )?Docker Application Container Engine`)
	// vllm-project/vllm vllm/v1/executor/multiproc_executor.py MultiprocExecutor.collective_rpc: raise
	// RuntimeError(f"Worker failed with error '{result}', please check the stack trace above for the root
	// cause") when a worker answers FAILURE: the worker's own traceback came first.
	workerFailed = regexp.MustCompile(`Worker failed with error '(.*)', please check the stack trace above for the root cause`)
	// Written after testdata/heldout19_lines.json showed them missed (session 19; that set no longer measures them):
	//
	// vLLM's V0 engine (0.5–0.10): vllm/entrypoints/launcher.py _add_shutdown_handlers, logger.fatal("AsyncLLMEngine
	// has failed, terminating server process"), "AsyncLLMEngine is already dead, terminating server process" and
	// "MQLLMEngine is already dead, terminating server process"; vllm/engine/multiprocessing/client.py
	// run_heartbeat_loop, RuntimeError(f"Engine process (pid {self._engine_process.pid}) died."); and
	// vllm/engine/multiprocessing/engine.py _health_check, RuntimeError("Engine loop has died").
	v0EngineDead = regexp.MustCompile(`(?:AsyncLLMEngine|MQLLMEngine) (?:has failed|is already dead), terminating server process|Engine process \(pid \d+\) died\.|RuntimeError(?:: |\(')Engine loop has died`)
	// Written after testdata/heldout20_lines.json showed them missed (session 19; that set no longer measures them):
	//
	// NVIDIA/gpu-monitoring-tools bindings/go/nvml/bindings.go init_(): if r == C.NVML_ERROR_LIBRARY_NOT_FOUND {
	// return errors.New("could not load NVML library") }, which NVIDIA/k8s-device-plugin (≤ 0.9) logs as
	// "Failed to initialize NVML: %v." (the oldest as "Failed to start nvml with error: %v"): the plugin's
	// container has no libnvidia-ml, so the node advertises no GPU.
	nvmlNotLoaded = regexp.MustCompile(`(?:Failed to initialize NVML|Failed to start nvml with error):\s+could not load NVML library`)
	// NVIDIA/nvidia-container-toolkit cmd/nvidia-container-runtime-hook/main.go doPrestart: log.Panicln("invoking the
	// NVIDIA Container Runtime Hook directly (e.g. specifying the docker --gpus flag) is not supported. Please use
	// the NVIDIA Container Runtime (e.g. specify the --runtime=nvidia flag) instead.") when the toolkit's mode
	// (cdi, csv) is not legacy.
	hookNotLegacy = regexp.MustCompile(`invoking the NVIDIA Container Runtime Hook directly \(e\.g\. specifying the docker --gpus flag\) is not supported`)
	// NVIDIA/FasterTransformer src/fastertransformer/utils/cuda_utils.h check(): throw std::runtime_error(
	// std::string("[FT][ERROR] CUDA runtime error: ") + _cudaGetErrorEnum(result) + " " + file + ":" + line),
	// TurboMind's ancestor (Triton's fastertransformer_backend prints it).
	ftCUDARuntimeOOM = regexp.MustCompile(`\[FT\]\[ERROR\] CUDA runtime error: out of memory`)
	// ray-project/ray python/ray/exceptions.py RaySystemError.__str__: f"System error: {self.client_exc}", the
	// gRPC channel's "failed to connect to all addresses; last error: …" to the head (the GCS, or Ray Client's
	// server) inside it.
	raySystemNoConnect = regexp.MustCompile(`RaySystemError: System error: .*?failed to connect to all addresses(?:; last error: [A-Z_]+: (?:ipv[46]:)?([^\s:]+:\d+))?`)
	// huggingface/transformers src/transformers/models/auto/auto_factory.py _BaseAutoModelClass: raise ValueError(
	// f"Unrecognized configuration class {config.__class__} for this kind of AutoModel: {cls.__name__}.\n" …):
	// the installed transformers knows the config but has no model of that kind for it.
	autoModelUnknown = regexp.MustCompile(`Unrecognized configuration class <class '([^']+)'> for this kind of AutoModel: (\w+)`)
	// Written after testdata/heldout21_lines.json showed them missed (session 19; that set no longer measures them):
	//
	// pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp getNCCLWatchdogTimeoutErrorMsg (2.4+; in
	// 2.9+ the HeartbeatMonitor's, with the backend's name): logPrefix(), "Received a dump signal due to a
	// collective timeout from ", extraMsg ("this local rank" or "rank N"), " and we will try our best to dump
	// the debug info. ", "Last enqueued NCCL work: ", …
	watchdogDump = regexp.MustCompile(`Received a dump signal due to a collective timeout from\s+(this local rank|rank \d+)`)
	// pytorch/pytorch torch/lib/c10d/Utils.cpp tcputil::connect (torch 1.x): throw std::invalid_argument("host not
	// found: " + std::string(gai_strerror(err))), a ValueError in Python: the master address does not resolve.
	c10dHostNotFound = regexp.MustCompile(`ValueError: host not found: (.+)`)
	// huggingface/huggingface_hub src/huggingface_hub/file_download.py _check_disk_space: warnings.warn("Not
	// enough free disk space to download the file. " f"The expected file size is: {expected_size / 1e6:.2f} MB. "
	// f"The target location {target_dir} only has {target_dir_free / 1e6:.2f} MB free disk space."); the
	// download goes on and fails with ENOSPC.
	hubNoSpace = regexp.MustCompile(`Not enough free disk space to download the file\. The expected file size is: ([\d.]+) MB\. The target location (\S*) ?only has ([\d.]+) MB free disk space`)
	// urllib3/urllib3 src/urllib3/connection.py _new_conn: ConnectTimeoutError(self, f"Connection to {self.host}
	// timed out. (connect timeout={self.timeout})"), read for the Hub's hosts only: the node cannot reach it.
	hubConnectTimeout = regexp.MustCompile(`ConnectTimeoutError: .*Connection to ((?:[\w-]+\.)*(?:huggingface\.co|hf\.co)) timed out\. \(connect timeout=`)
	pullDenied        = regexp.MustCompile(`pull access denied for ([^\s,]+), repository does not exist or may require 'docker login'`)
	cdiUnresolved     = regexp.MustCompile(`unresolvable CDI devices ([\w.-]*nvidia\.com/[\w.-]+=[^\s,]+)|failed to inject CDI devices: `)
	// NVML's nvmlReturn_t NVML_ERROR_UNKNOWN = 999 ("An internal driver error occurred", nvml.h as in
	// NVIDIA/go-nvml pkg/nvml/nvml.h), as nvidia-smi prints it: "Failed to initialize NVML: Unknown Error".
	// In a container it is the device cgroup lost after the host's systemd reloads its units (NVIDIA's
	// notice, nvidia-docker#1730): the container no longer reaches its GPUs.
	nvmlUnknown = regexp.MustCompile(`Failed to initialize NVML: Unknown Error`)
	// NVIDIA/libnvidia-container src/dsl.c, dsl_evaluate: error_setx(err, "unsatisfied condition: %s", buf),
	// buf being the rule as written ("cuda>=12.8", "cuda >= 9.0"), which src/cli/configure.c reports as
	// warnx("requirement error: %s", …) (1.x adds ", please update your driver to a newer version, or use an
	// earlier cuda container"). The older nvidiaCli rule reads it with the program's prefix; this one without
	// (a title that drops the colon, or quotes only the error).
	cudaRequirement = regexp.MustCompile(`requirement error: unsatisfied condition: (cuda\s*[<>=!]+\s*[\d.]+)`)
	// pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, broadcastUniqueNCCLID (cf1380dfb6):
	//   "[", rank_, "] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value
	//   store by key '", storeKey, "', but store->get('", storeKey, "') got error: " + e.what() + ". This may
	//   indicate a possible application crash on rank 0 or a network set up issue."
	ncclIDStore = regexp.MustCompile(`\[(\d+)\] is setting up NCCL communicator and retrieving ncclUniqueId from \[0\] via c10d key-value store by key '[^']*', but store->get\('[^']*'\) got error: ([^.\[]*)`)
	// The same store's own timeout: torch/csrc/distributed/c10d/TCPStore.cpp, TCPStore::doWait (00321a02d7,
	// torch 2.x before 2.5): C10_THROW_ERROR(DistStoreError, "Socket Timeout") after the server cancelled the wait
	// (the store answered; the key never came), 2.5+ (PR 131808): fmt::format("wait timeout after {}ms,
	// keys: {}", …); and Utils.hpp's SYSCHECK (edeed37857): C10_THROW_ERROR(DistNetworkError, "Socket Timeout")
	// on EAGAIN. Read only with torch's exception names: torch before DistStoreError raised a bare RuntimeError("Socket
	// Timeout") (torch/lib/c10d/Utils.hpp), words too generic to read alone.
	storeTimeout = regexp.MustCompile(`(?:DistStoreError|DistNetworkError): Socket Timeout|DistStoreError: wait timeout after (\d+)ms, keys: (\S+)`)
	// NVIDIA/nccl src/proxy.cc, the proxy service thread (2.12–2.30):
	//   WARN("[Proxy Service %d] Failed to execute operation %s from rank %d, retcode %d", proxyState->tpRank,
	//   ncclProxyMsgTypeStr[type], peer->tpRank, res)
	// printed only when the communicator is not aborting; the op is any of ncclProxyMsgTypeStr (Init, Setup,
	// Connect, Close, Register, …). The older ncclWarnOp rule reads Connect; this one the others.
	ncclProxyOp = regexp.MustCompile(`\[Proxy Service (\d+)\] Failed to execute operation (\w+) from rank (\d+), retcode (\d+)`)
	// NVIDIA/nccl src/bootstrap.cc, bootstrapNetRecv / bootstrapNetSendRecv (2.18–2.30):
	//   WARN("Message truncated : received %d bytes instead of %d", recvSize, size); return ncclInternalError;
	// a bootstrap message of another size than this rank expects: ranks of different NCCL builds, or another
	// process talking to the bootstrap socket.
	ncclTruncated = regexp.MustCompile(`Message truncated : received (\d+)(?:,\d+)? bytes instead of (\d+)`)
	// ray-project/ray python/ray/exceptions.py (3c6f7df5c0), ActorDiedError: self.base_error_msg = "The actor
	// died unexpectedly before finishing this task." (RayActorError.__str__ before 2.0): a Ray actor, under
	// vLLM's Ray executor one of its workers, died. Read as the exception line (with its name) only.
	actorDied = regexp.MustCompile(`(?:ActorDiedError|RayActorError): The actor died unexpectedly before finishing this task`)
	// vllm-project/vllm vllm/executor/ray_utils.py (9cfdcd89fe), _wait_until_pg_ready:
	//   "Waiting for creating a placement group of specs for %d seconds. specs=%s. Check `ray status` …"
	// cut after the specs (the older pgWait rule wants ". Check"): the same warning.
	pgWaitCut = regexp.MustCompile(`Waiting for creating a placement group of specs for (\d+) seconds\. specs=(\[.*\])\.?\s*$`)
	// vllm-project/vllm vllm/config.py, ModelConfig.verify_with_parallel_config (vllm/config/model.py, 18ec662925, from 0.11):
	//   f"Total number of attention heads ({total_num_attention_heads}) must be divisible by tensor parallel size ({tensor_parallel_size})."
	// with the placeholders gone (an issue title); the older heads rule reads the numbers.
	headsBare = regexp.MustCompile(`Total number of attention heads must be divisible by tensor parallel size`)
)

const fixOffline = "serve the model's local path (mounted on every node), or fill each node's Hugging Face cache before setting HF_HUB_OFFLINE (or cutting its network)"

const fixRayOOM = "free host memory on that node (other processes, vLLM's --swap-space or --cpu-offload-gb) or give it more; tpdeploy's own memory guard (policy memory_floor) then stops the engine before Ray's monitor or the kernel kills it"

const fixDisk = "free space on that node's disk (`df -h` and `df -i` where the cache lives), or point HF_HOME and the caches at a larger disk"

const fixIB = "check the RDMA link between the nodes (ibstat, cables, the same RoCE GID and MTU on both ends), or set NCCL_IB_DISABLE=1 to fall back to sockets"

// familyWords holds a fixed word of every family above: a line with none of them skips the
// regexps, which keeps the cost per ordinary line at a few substring searches.
var familyWords = []string{
	"atchdog", "NCCL work", "NCCL operations", "ocketProgress", "socketFinalizeAccept", "socketStartConnect",
	"Net : Connection", "Proxy Call", "Cuda failure", "Got completion", "completed with error",
	"could not select device driver", "Tensor parallel size", "is not a local folder", "offline mode",
	"outgoing traffic", "is restricted", "deserializing header", "CUDA error: out of memory", "CUDA error: invalid device ordinal", "To serve at least one request", "No module named 'ray'", "Ray is not installed", "nvidia-container-cli", "Found no NVIDIA driver", "Repo id must", "NCCL Error ", "Call to ibv_", "does not appear to have a file named", "shared memory segment", "couldn't connect to", "CUDA driver error",
	"Unable to register worker", "Failed to register worker", "was supported in vLLM until", "not supported in-tree anymore",
	"marked dead", "marked as dead", "died unexpectedly", "got fatal signal", " died, exit code", "C10d store", "Original timeout was",
	"while trying to connect to", "Heartbeat monitor", "watchdog got stuck", "pair.cc", "Cache directory not found", "nvidia-container",
	"runtime name:", "Unknown runtime specified", "version mismatch", "Max retries exceeded",
	"killed due to memory pressure", "exceeds the memory usage threshold", "Devices available",
	"WorkerProc initialization", "KV cache memory: -", "Incorrect path_or_model_id", "already checked in",
	"async fatal event", "async event", "encountered a fatal error", "Failed to CUDA", "node it was running on is dead",
	"can fulfill resource request", "PollConnect", "ConnectCheck", "ncclSocketConnect", "exceeded timeouts", "403 Client Error",
	" hook #", "running low on memory", "no NVIDIA GPU device", "Access Token", "Invalid credentials",
	"CDI devices", "Failed to initialize NVML", "unsatisfied condition", "ncclUniqueId", "Socket Timeout", "wait timeout after",
	"Failed to execute operation", "Message truncated", "actor died unexpectedly", "Waiting for creating a placement group",
	"attention heads must be",
	"listen on any local network address", "Cannot connect to the Docker daemon", "connect to the Docker daemon socket", "pull access denied for",
	"Insufficient nvidia.com/gpu", "Insufficient amd.com/gpu", "enough resources: GPUs", "operation to complete",
	"[Errno 28]", "[Errno 98]", "error while attempting to bind", "CUDA runtime error in",
	"is not divisible by", "(os error 28)", "connect() timed out", "CUDA runtime error: out of memory", "is configured",
	"Docker Application Container Engine", "please check the stack trace above",
	"terminating server process", "Engine process (pid", "Engine loop has died",
	"could not load NVML library", "Runtime Hook directly", "[FT][ERROR]", "failed to connect to all addresses", "for this kind of AutoModel",
	"Received a dump signal", "host not found: ", "Not enough free disk space", "timed out. (connect timeout=",
}

// families classifies the lines whose upstream format strings are listed above.
func families(c ctx) *Finding {
	t := c.t
	// NCCL's back trace (" -> ") is common in INFO lines; only its WARN form passes.
	if !containsAny(t, familyWords) && !(strings.Contains(t, " -> ") && strings.Contains(t, "NCCL WARN")) {
		return nil
	}
	if f := collectives(c); f != nil {
		return f
	}
	if m := dockerNoDriver.FindStringSubmatch(t); m != nil {
		driver := "the default driver"
		if m[1] != "" {
			driver = "the driver \"" + m[1] + "\""
		}
		return c.find(failure.GPUsNotVisible, "Docker on "+c.onNode()+" cannot give the container a GPU: "+driver+" is not registered for GPU requests (no NVIDIA container toolkit or runtime)",
			"install the NVIDIA container toolkit on that node and register it with Docker (nvidia-ctk runtime configure --runtime=docker, then restart dockerd); check `docker run --rm --gpus all <image> nvidia-smi`", true)
	}
	if m := tpTooLarge.FindStringSubmatch(t); m != nil {
		return c.find(failure.GPUsNotVisible, "vLLM's mp executor needs "+m[1]+" GPUs (tensor × pipeline) but sees "+m[2]+" on "+c.onNode()+": the container was given fewer GPUs, or the deploy spans nodes and vLLM fell back to mp without Ray (only the local GPUs count) or without --nnodes",
			fixNoGPU+"; across nodes use the Ray executor with Ray in the image, or vLLM's --nnodes/--node-rank multi-node mode", true)
	}
	if m := tfNotFound.FindStringSubmatch(t); m != nil {
		return c.find(failure.ModelNotFound, strings.Trim(m[1], "'\"`")+" is neither a directory on "+c.onNode()+" nor a Hugging Face model id this token can see (a path not mounted there, a misspelt id, or a private or gated repository)", fixModel, true)
	}
	if m := hfOffline.FindStringSubmatch(t); m != nil {
		what := "Hugging Face offline mode (HF_HUB_OFFLINE) is set on " + c.onNode() + " and the model is not in its cache"
		if m[1] != "" {
			what += " (it asked " + m[1] + ")"
		}
		return c.find(failure.ModelOffline, what, fixOffline, true)
	}
	if m := gatedAccess.FindStringSubmatch(t); m != nil {
		return c.find(failure.ModelGated, "Hugging Face refuses the gated model "+m[1]+": the token passed on "+c.onNode()+" lacks access",
			"accept the model's terms on huggingface.co with the account whose token is passed as HF_TOKEN to every node's container, or mount downloaded weights and serve the local path", true)
	}
	if m := archDropped.FindStringSubmatch(t); m != nil {
		if m[2] != "" {
			return c.find(failure.ModelUnsupported, "the image's vLLM dropped the architecture "+m[1]+" after v"+m[2],
				"use a vLLM image of v"+m[2]+" or older for this model (the same image on every node), or a model whose architecture this release supports", true)
		}
		return c.find(failure.ModelUnsupported, "the image's vLLM moved the architecture "+m[1]+" out of tree: it needs vLLM's plugin for it",
			"build the image with the plugin the error names installed (FROM the same vLLM image, pip install the plugin), the same image on every node", true)
	}
	if m := stHeader.FindStringSubmatch(t); m != nil {
		return c.find(failure.ModelCorrupt, "a .safetensors file on "+c.onNode()+" has an unreadable header ("+strings.TrimSpace(m[1])+"): a truncated download or copy, or a Git LFS pointer instead of the weights",
			"compare the model's files on that node with the head's (sizes, hashes) and copy or download the broken shards again", true)
	}
	if cudaRuntimeOOM.MatchString(t) {
		return c.find(failure.CUDAOutOfMemory, "the CUDA runtime ran out of GPU memory on "+c.onNode()+" (outside torch's allocator: CUDA graphs, NCCL buffers, or another process on the GPU)",
			"lower --gpu-memory-utilization or --max-model-len, or use more GPUs; check nvidia-smi for other processes on that GPU", true)
	}
	if cudaBadOrdinal.MatchString(t) {
		return c.find(failure.GPUsNotVisible, "a process on "+c.onNode()+" was told to use a GPU index its container does not have (CUDA: invalid device ordinal): the container sees fewer GPUs than the node's ranks",
			fixNoGPU, true)
	}
	if m := kvStart.FindStringSubmatch(t); m != nil {
		return c.find(failure.KVCacheTooSmall, "one request of max length "+m[1]+" needs more KV cache than the memory left after the weights",
			"lower --max-model-len, or raise --gpu-memory-utilization, or spread the model over more GPUs", true)
	}
	if m := nvidiaCli.FindStringSubmatch(t); m != nil {
		return c.find(failure.GPUsNotVisible, "the NVIDIA container runtime on "+c.onNode()+" could not give the container its GPUs ("+m[1]+" error: "+clip(strings.TrimSpace(m[2]), 120)+"): no NVIDIA driver on the host, or the toolkit cannot load it",
			"install the NVIDIA driver on that node and check `nvidia-smi` on the host, then `docker run --rm --gpus all <image> nvidia-smi`; reinstall the NVIDIA container toolkit if the host works but containers do not", true)
	}
	if torchNoDriver.MatchString(t) {
		return c.find(failure.GPUsNotVisible, "torch finds no NVIDIA driver in the container on "+c.onNode()+" (the container was started without its GPUs, or the host has no driver)", fixNoGPU, true)
	}
	if hfRepoIDBare.MatchString(t) && !strings.Contains(t, "Error retrieving file list") {
		return c.find(failure.ModelNotFound, "the model path does not exist on "+c.onNode()+", so it was taken for a Hugging Face repository id (and is not a valid one)", fixModel, true)
	}
	if m := torchNCCLErr.FindStringSubmatch(t); m != nil {
		return c.find(failure.NCCLError, "NCCL failed on "+c.onNode()+" (error "+m[1]+": "+strings.TrimSpace(m[2])+")", fixNCCL, true)
	}
	if m := ibvModifyQP.FindStringSubmatch(t); m != nil {
		return c.find(failure.NCCLError, "NCCL on "+c.onNode()+" could not connect a queue pair on "+m[3]+" to its peer ("+m[1]+" "+strings.TrimSpace(m[2])+"): the two HCAs share no working link",
			"check the cable between the pair (starter plan draws the measured links) and that NCCL_IB_HCA, NCCL_ALGO and the rank order are the plan's: on a ring only NCCL_ALGO=Ring keeps NCCL to cabled pairs", true)
	}
	if m := ibvCall.FindStringSubmatch(t); m != nil {
		return c.find(failure.NCCLError, "NCCL could not set up RDMA on "+c.onNode()+" ("+m[1]+": "+clip(strings.TrimSpace(m[2]), 80)+"): the HCA, port, GID index or the peer's configuration does not match", fixIB, true)
	}
	if m := tfNoShard.FindStringSubmatch(t); m != nil {
		return c.find(failure.ModelIncomplete, "the model "+strings.Trim(m[1], "'\"`")+" lacks the weight file "+m[2]+" on "+c.onNode()+" (a partial download or copy)", fixIncomplete, true)
	}
	if m := ncclShm.FindStringSubmatch(t); m != nil {
		size := ""
		if m[3] != "" {
			size = " (" + m[3] + " bytes)"
		}
		return c.find(failure.NCCLError, "NCCL on "+c.onNode()+" failed "+m[1]+" its shared-memory segment"+size+" in /dev/shm: the container's /dev/shm is too small",
			"raise the agent's --shm-size (TPDEPLOY_SHM_SIZE; each container has its own /dev/shm of that size, 10g by default) — NCCL's SHM transport needs it — or set NCCL_SHM_DISABLE=1", true)
	}
	if m := tfNoConnect.FindStringSubmatch(t); m != nil {
		return c.find(failure.ModelOffline, c.onNode()+" cannot reach "+m[1]+" and the model is not in its Hugging Face cache", fixOffline, true)
	}
	if cudaDriverOOM.MatchString(t) {
		return c.find(failure.CUDAOutOfMemory, "the CUDA driver ran out of GPU memory on "+c.onNode()+" (outside torch's allocator)",
			"lower --gpu-memory-utilization or --max-model-len, or use more GPUs; check nvidia-smi for other processes on that GPU", true)
	}
	if noRayModule.MatchString(t) || vllmNoRay.MatchString(t) {
		return c.find(failure.ImageLacksRay, "the image's Python on "+c.onNode()+" has no ray module (stock vllm/vllm-openai images ship without Ray since v0.18.0)", fixRayImage, true)
	}
	if m := rayNodeDead.FindStringSubmatch(t); m != nil {
		what := "a Ray node"
		if a := rayNodeDeadAddr.FindStringSubmatch(t); a != nil {
			what = "the Ray node at " + a[1]
		} else if m[1] != "" {
			what = "the Ray node " + clip(m[1], 60)
		}
		return c.find(failure.RayNodeDead, "Ray marked "+what+" dead (its raylet stopped answering health checks: the node, its Ray container or the link to the head is down, or the raylet was killed)",
			"check that node: is its Ray container running, did it reboot or run out of memory (dmesg), does the link to the head still carry traffic; then deploy again", true)
	}
	if m := workerDied.FindStringSubmatch(t); m != nil {
		who := "a vLLM worker process"
		switch {
		case m[1] != "":
			who = "the vLLM worker " + m[1]
		case m[2] != "":
			who = "the vLLM worker " + m[2] + " (pid " + m[3] + ", exit code " + m[4] + ")"
		}
		return c.find(failure.EngineDead, "vLLM's engine died: "+who+" died and the executor shut down",
			"see that worker's lines above (a CUDA, NCCL or memory error, or the kernel's OOM killer: dmesg); a lost rank is the usual cause", true)
	}
	if m := c10dStore.FindStringSubmatch(t); m != nil {
		what := "a worker cannot connect to the torch c10d store (the rendezvous)"
		switch {
		case m[4] != "":
			what = "a worker timed out after " + m[2] + " connecting to the torch c10d rendezvous at " + m[3] + ":" + m[4]
		case m[1] != "":
			what = "a worker timed out after " + m[1] + " ms connecting to the torch c10d store (the rendezvous)"
		}
		return c.find(failure.C10dUnreachable, what+" on "+c.onNode(), fixC10d, true)
	}
	if m := ncclHeartbeat.FindStringSubmatch(t); m != nil {
		return c.find(failure.CollectiveTimeout, "torch's NCCL watchdog on "+c.onNode()+" was stuck in an NCCL or CUDA call (a collective a peer rank never joined) and takes the process down",
			"find the rank that failed first (its node's lines before this one); check the link between the nodes and that NCCL_SOCKET_IFNAME names the planned subnet's interface on every node", true)
	}
	if m := glooConnect.FindStringSubmatch(t); m != nil {
		diag := "Gloo on " + c.onNode() + " could not connect to its peer at " + m[1] + ":" + m[2] + " (" + clip(strings.TrimSpace(m[3]), 60) + ")"
		if strings.HasPrefix(m[1], "127.") || m[1] == "::1" {
			diag += ": the peer advertised a loopback address (its hostname resolves to 127.x)"
		}
		return c.find(failure.GlooLoopback, diag, fixGloo, true)
	}
	if m := hfNoCache.FindStringSubmatch(t); m != nil {
		return c.find(failure.ModelOffline, "the Hugging Face cache "+m[1]+" does not exist on "+c.onNode()+" (the model was to come from it)", fixOffline, true)
	}
	if m := nvidiaHookMissing.FindStringSubmatch(t); m != nil {
		return c.find(failure.GPUsNotVisible, "Docker on "+c.onNode()+" is set up for the NVIDIA runtime but "+m[1]+" is not installed: the container cannot get its GPUs",
			"install the NVIDIA container toolkit on that node (it provides "+m[1]+") and restart dockerd; check `docker run --rm --gpus all <image> nvidia-smi`", true)
	}
	if m := dockerNoRuntime.FindStringSubmatch(t); m != nil {
		return c.find(failure.GPUsNotVisible, "Docker on "+c.onNode()+" has no runtime named "+m[1]+" (the NVIDIA container toolkit is not installed or not registered in daemon.json): the container cannot get its GPUs",
			"install the NVIDIA container toolkit on that node and register it with Docker (nvidia-ctk runtime configure --runtime=docker, then restart dockerd); check `docker run --rm --gpus all <image> nvidia-smi`", true)
	}
	if nvmlMismatch.MatchString(t) {
		return c.find(failure.GPUsNotVisible, "NVML cannot start on "+c.onNode()+": the loaded NVIDIA kernel module and the installed user-space driver are different versions (the driver was upgraded without a reboot)",
			"reboot that node (or unload and reload the nvidia kernel modules) so the loaded module matches the installed driver; check `nvidia-smi` on the host, then `docker run --rm --gpus all <image> nvidia-smi`", true)
	}
	if m := hfMaxRetry.FindStringSubmatch(t); m != nil && !strings.Contains(t, "etrying") && !strings.Contains(t, "Error retrieving") {
		return c.find(failure.ModelOffline, c.onNode()+" cannot reach "+m[1]+" (no network or DNS to it) and the model is not in its Hugging Face cache", fixOffline, true)
	}
	if m := rayOOMKill.FindStringSubmatch(t); m != nil {
		at := "on " + c.onNode()
		if m[2] != "" {
			at = "on the node at " + m[2]
		}
		return c.find(failure.HostMemoryPressure, "Ray's memory monitor killed "+m[1]+" worker(s) "+at+": its host memory use passed Ray's kill threshold (RAY_memory_usage_threshold, default 0.95)", fixRayOOM, true)
	}
	if m := rayOOMDetail.FindStringSubmatch(t); m != nil {
		return c.find(failure.HostMemoryPressure, "Ray's memory monitor killed a worker on the node at "+m[1]+": "+m[2]+" of "+m[3]+" GB of host memory in use, above Ray's kill threshold "+m[4], fixRayOOM, true)
	}
	if m := nbodyDevices.FindStringSubmatch(t); m != nil {
		return c.find(failure.GPUsNotVisible, "the container on "+c.onNode()+" sees "+m[1]+" GPU(s) but "+m[2]+" were asked for (CUDA's device count)", fixNoGPU, true)
	}
	if workerProcInit.MatchString(t) {
		return c.find(failure.EngineDead, "vLLM's engine could not start: a worker process on "+c.onNode()+" failed while initializing (its traceback, above, names the cause)",
			"see that worker's lines above (an NCCL, CUDA or memory error, or a missing model file); a lost rank is the usual cause", true)
	}
	if m := kvNegative.FindStringSubmatch(t); m != nil {
		return c.find(failure.KVCacheTooSmall, "no GPU memory is left for the KV cache after the weights on "+c.onNode()+" ("+m[1]+" GiB available)",
			"raise --gpu-memory-utilization (if the GPU is not shared) or spread the model over more GPUs (tensor/pipeline size); a smaller --max-model-len does not help here", true)
	}
	if m := tfIncorrectPath.FindStringSubmatch(t); m != nil {
		return c.find(failure.ModelNotFound, m[1]+" is neither a directory on "+c.onNode()+" nor a valid Hugging Face repository id (a path not mounted in the container)", fixModel, true)
	}
	if m := ncclRankTwice.FindStringSubmatch(t); m != nil {
		return c.find(failure.NCCLError, "NCCL's bootstrap on "+c.onNode()+" saw rank "+m[1]+" of "+m[2]+" check in twice: two processes claim one rank (another job on the same master port or NCCL_COMM_ID, or a rank started twice)",
			"stop the other job or leftover process on that node (nvidia-smi, the containers of an earlier deploy) and give each deploy its own master port", true)
	}
	if m := ibAsyncFatal.FindStringSubmatch(t); m != nil {
		what := m[1]
		if what == "" {
			what = "fatal error detected in " + m[2]
		}
		return c.find(failure.NCCLError, "the RDMA device NCCL uses on "+c.onNode()+" reported a fatal event ("+strings.TrimSpace(what)+"): a link, port or queue-pair fault", fixIB, true)
	}
	if m := ncclCudaAlloc.FindStringSubmatch(t); m != nil {
		return c.find(failure.CUDAOutOfMemory, "NCCL on "+c.onNode()+" could not allocate "+m[1]+" bytes of GPU memory for its buffers (they did not fit next to the weights and KV cache)",
			"lower --gpu-memory-utilization (NCCL allocates outside it), or --max-model-len, or use more GPUs; check nvidia-smi for other processes on that GPU", true)
	}
	if m := rayTaskNodeDead.FindStringSubmatch(t); m != nil && !strings.Contains(t, "will be retried") {
		return c.find(failure.RayNodeDead, "Ray says the node at "+m[1]+" that ran a task is dead or unavailable (its raylet stopped answering: the node, its Ray container or the link to the head is down, or the raylet was killed)",
			"check that node: is its Ray container running, did it reboot or run out of memory (dmesg), does the link to the head still carry traffic; then deploy again", true)
	}
	if runcNvidiaHook.MatchString(t) {
		return c.find(failure.GPUsNotVisible, "the NVIDIA container hook failed when Docker on "+c.onNode()+" started the container (the GPUs could not be mounted into it: the driver, NVML or the toolkit on the host is broken)",
			"check `nvidia-smi` on that node's host (a GPU that fell off the bus or a driver/library mismatch needs a reboot), then `docker run --rm --gpus all <image> nvidia-smi`; reinstall the NVIDIA container toolkit if the host's GPUs work", true)
	}
	if m := rayOOMTask.FindStringSubmatch(t); m != nil && !strings.Contains(t, "will be retried") {
		n := "a worker"
		if m[1] != "" {
			n = m[1] + " worker(s)"
		}
		return c.find(failure.HostMemoryPressure, "Ray's memory monitor killed "+n+" on "+c.onNode()+": the node's host memory use passed Ray's kill threshold (RAY_memory_usage_threshold, default 0.95)", fixRayOOM, true)
	}
	if m := rayInfeasible.FindStringSubmatch(t); m != nil && pinned(m[1]) != "" {
		f := c.find(failure.PlacementGroupPending, "Ray's autoscaler finds no node that can hold the resource request"+pinText(m[1]),
			"if it stays pending: make the pinned address the --node-ip-address Ray registered for that node (VLLM_HOST_IP = --node-ip-address on every node) and free GPUs held by other containers", false)
		f.Pinned = pinned(m[1])
		return f
	}
	if m := hubMirror403.FindStringSubmatch(t); m != nil && mirror403(t) {
		return c.find(failure.ModelGated, "the Hugging Face mirror "+m[1]+" refuses the files of "+m[2]+" (403: a gated repository the mirror does not serve, or the token lacks access)",
			"accept the model's terms on huggingface.co with the account whose HF_TOKEN every node's container gets and download from huggingface.co itself (unset HF_ENDPOINT), or serve downloaded weights", true)
	}
	if m := noDevNode.FindStringSubmatch(t); m != nil {
		return c.find(failure.GPUsNotVisible, "the container on "+c.onNode()+" has no GPU device node ("+m[1]+" does not exist, so CUDA finds no GPU): it was started without its GPUs (no --gpus, or not the NVIDIA runtime)", fixNoGPU, true)
	}
	if hubTokenRefused.MatchString(t) && !strings.Contains(t, "error_message") && !strings.Contains(t, "!=") {
		return c.find(failure.ModelUnavailable, "Hugging Face refuses the token itself (expired, revoked or mistyped), so every download fails",
			"create a new token at huggingface.co/settings/tokens and pass it as HF_TOKEN to every node's container (or mount downloaded weights)", true)
	}
	if rayletRegister.MatchString(t) {
		return c.find(failure.RayDriverAttach, "a Ray worker or driver could not register with the raylet of its node (the raylet closed the socket or is gone): it runs outside the Ray node's container, against another Ray session, or the raylet died", fixDriver, true)
	}
	return heldout15Families(c)
}

// heldout15Families reads the formats heldout15 showed missed (the sources are at their regexps).
func heldout15Families(c ctx) *Finding {
	t := c.t
	if m := cdiUnresolved.FindStringSubmatch(t); m != nil {
		dev := "the NVIDIA GPU"
		if m[1] != "" {
			dev = m[1]
		}
		return c.find(failure.GPUsNotVisible, "the container runtime on "+c.onNode()+" finds no CDI spec for "+dev+" (the NVIDIA toolkit's CDI spec was never generated there, or is stale after a driver upgrade): the container cannot get its GPUs",
			"generate the spec on that node, `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (again after every driver upgrade), and check `nvidia-ctk cdi list`; or request the GPUs with --gpus rather than a CDI device", true)
	}
	if nvmlUnknown.MatchString(t) {
		return c.find(failure.GPUsNotVisible, "NVML cannot reach the GPUs on "+c.onNode()+" (Unknown Error): a container that lost its GPU devices (the host's systemctl daemon-reload removes their cgroup rules under Docker's systemd cgroup driver), or a broken driver",
			"recreate the engine containers (deploy again); to stop it recurring, run `nvidia-ctk system create-dev-char-symlinks --create-all` on the host or give Docker \"exec-opts\": [\"native.cgroupdriver=cgroupfs\"]; check `nvidia-smi` on the host", true)
	}
	if m := cudaRequirement.FindStringSubmatch(t); m != nil {
		return c.find(failure.GPUsNotVisible, "the image on "+c.onNode()+" requires "+strings.Join(strings.Fields(m[1]), "")+" and the host's NVIDIA driver is older, so the NVIDIA runtime refuses to give the container its GPUs",
			"upgrade the NVIDIA driver on that node to one that supports the image's CUDA, or use an image built for the driver's CUDA (the same image on every node)", true)
	}
	if m := ncclIDStore.FindStringSubmatch(t); m != nil {
		return c.find(failure.C10dUnreachable, "rank "+m[1]+" could not get rank 0's NCCL id from the c10d store ("+clip(strings.TrimSpace(m[2]), 80)+"): rank 0 crashed or never got that far, or the ranks do not share one master address (torch: \"a possible application crash on rank 0 or a network set up issue\")",
			"read rank 0's node (the head) for the first failure; if it is still up, "+fixC10d, true)
	}
	if m := storeTimeout.FindStringSubmatch(t); m != nil {
		what := "a wait on torch's c10d store timed out on " + c.onNode()
		if m[1] != "" {
			what += " after " + m[1] + " ms (keys " + clip(m[2], 60) + ")"
		}
		return c.find(failure.C10dUnreachable, what+": the store answered, but the rank that sets the key (rank 0 for the rendezvous) never did: it failed first or hangs, or the ranks were started with different master addresses or world sizes",
			"read the first failure on the other ranks' nodes (the head first); check that every rank gets the same master address, port and world size; if they do, "+fixC10d, true)
	}
	if m := ncclProxyOp.FindStringSubmatch(t); m != nil {
		return c.find(failure.NCCLError, "NCCL's proxy on "+c.onNode()+" (rank "+m[1]+") could not execute "+m[2]+" for rank "+m[3]+" (ncclResult "+m[4]+"): that rank's connection failed or it died", fixNCCL, true)
	}
	if m := ncclTruncated.FindStringSubmatch(t); m != nil {
		return c.find(failure.NCCLError, "NCCL's bootstrap on "+c.onNode()+" received "+m[1]+" bytes where it expected at most "+m[2]+": the ranks run different NCCL builds, or another process connected to the bootstrap socket",
			"run one image (one NCCL build) on every node, and give the deploy a master port no other job uses", true)
	}
	if actorDied.MatchString(t) {
		return c.find(failure.EngineDead, "vLLM's engine died: a Ray actor (a vLLM worker) on "+c.onNode()+" died before finishing its task",
			"see that worker's lines above or its node's raylet log (a CUDA, NCCL or memory error, a segfault, or the OOM killer: dmesg); a lost rank is the usual cause", true)
	}
	if m := pgWaitCut.FindStringSubmatch(t); m != nil && !strings.Contains(t, "Cannot provide") {
		secs, _ := strconv.Atoi(m[1])
		f := c.find(failure.PlacementGroupPending, "vLLM is waiting for its placement group"+pinText(m[2]),
			"if it stays pending: make the pinned address the --node-ip-address Ray registered for that node (VLLM_HOST_IP = --node-ip-address on every node) and free GPUs held by other containers", false)
		f.Pinned, f.Waited = pinned(m[2]), time.Duration(secs)*time.Second
		return f
	}
	if headsBare.MatchString(t) {
		return c.find(failure.InvalidParallelLayout, "the model's attention heads are not divisible by the tensor-parallel size",
			"use a tensor-parallel size that divides the model's num_attention_heads (config.json) and make up the GPU count with pipeline parallelism", true)
	}
	return heldout16Families(c)
}

// heldout16Families reads the formats heldout16 showed missed (the sources are at their regexps).
func heldout16Families(c ctx) *Finding {
	t := c.t
	if c10dListen.MatchString(t) {
		port := ""
		if m := c10dListenPort.FindStringSubmatch(t); m != nil {
			port = " " + m[1] + m[2]
		}
		if strings.Contains(t, "EADDRINUSE") || strings.Contains(t, "errno: 98") || strings.Contains(t, "Address already in use") {
			return c.find(failure.ResourcesBusy, "torch's c10d store (rank 0's rendezvous) cannot listen on port"+port+" on "+c.onNode()+": another process holds it (a rank 0 left from an earlier run, another job, or a second engine in the same process)",
				"free the port on that node (find its holder with `ss -ltnp`; remove a leftover engine container), or give the deploy a master port nothing else uses (ports.master)", true)
		}
		return c.find(failure.ResourcesBusy, "torch's c10d store (rank 0's rendezvous) cannot listen on port"+port+" on "+c.onNode()+": the port is held by another process, or the master address is not one of this node's addresses",
			"check that nothing holds the master port on that node (`ss -ltnp`) and that the master address is the head's own address on the planned subnet, or choose another ports.master", true)
	}
	if m := dockerDaemonDown.FindStringSubmatch(t); m != nil {
		return c.find(failure.DockerUnreachable, "the Docker client on "+c.onNode()+" cannot reach the Docker daemon at "+strings.TrimSuffix(m[1], ".")+": the daemon is not running (or failed to start), or the client points at another socket (DOCKER_HOST, the context)",
			"start the Docker daemon on that node (`systemctl status docker`, its journal for why it did not start) and check DOCKER_HOST / `docker context ls`", true)
	}
	if m := dockerSocketDenied.FindStringSubmatch(t); m != nil {
		return c.find(failure.DockerUnreachable, "the Docker client on "+c.onNode()+" may not open the daemon's socket "+m[1]+" (permission denied): the user is not in the docker group, or the socket's owner is wrong",
			"run it as a user in the socket's group (add it to `docker` and log in again) or as root; for the node agent, give it the socket with the group it runs as", true)
	}
	if m := k8sInsufficient.FindStringSubmatch(t); m != nil {
		return c.find(failure.InsufficientGPUs, "Kubernetes cannot schedule the pod: "+m[1]+" node(s) lack free "+m[2]+" (the GPUs are held by other pods, or the device plugin advertises none)",
			"free GPUs on a node (other pods' requests: `kubectl describe node`), check that the NVIDIA device plugin advertises them (the node's Allocatable), or request fewer GPUs per pod", true)
	}
	if kaiNoGPUs.MatchString(t) {
		return c.find(failure.InsufficientGPUs, "the KAI scheduler finds no node with enough free GPUs for the pod",
			"free GPUs on a node or request fewer per pod; check the queue's GPU quota and that the device plugin advertises the GPUs", true)
	}
	if glooRecvTimeout.MatchString(t) {
		return c.find(failure.CollectiveTimeout, "a Gloo receive on "+c.onNode()+" timed out: the peer rank stopped taking part (it died, hangs, or is stuck in a collective of another order)",
			"find the rank that failed first (its node's lines before the timeout) and check the link between the nodes and GLOO_SOCKET_IFNAME", true)
	}
	if m := pullDenied.FindStringSubmatch(t); m != nil {
		return c.find(failure.ImageMissing, "the image "+m[1]+" is not on "+c.onNode()+" and the registry refused to pull it (no such repository under that name, or it needs a login): a locally built or misspelled image name",
			"build or load the image on every node under that exact name (`docker images` on each), or log in to the registry that holds it (`docker login`) and pull it there", true)
	}
	return heldout17Families(c)
}

// heldout17Families reads the formats heldout17 showed missed (the sources are at their regexps).
func heldout17Families(c ctx) *Finding {
	t := c.t
	if m := errnoNoSpace.FindStringSubmatch(t); m != nil {
		where := "a filesystem"
		if m[1] != "" {
			where = "the filesystem of " + m[1]
		}
		return c.find(failure.DiskInsufficient, "a write on "+c.onNode()+" found "+where+" full (ENOSPC): the model download, the HF cache, a compile cache or /tmp ran out of space (or of inodes)",
			fixDisk, true)
	}
	if m := asyncioBindInUse.FindStringSubmatch(t); m != nil {
		return c.find(failure.ResourcesBusy, "the API server on "+c.onNode()+" cannot listen on "+m[1]+" port "+m[2]+": another process holds it (an earlier vLLM, another server)",
			"free the port on that node (`ss -ltnp` names its holder; remove a leftover engine container), or serve on another port (ports.vllm)", true)
	}
	if errnoAddrInUse.MatchString(t) {
		return c.find(failure.ResourcesBusy, "a socket on "+c.onNode()+" cannot bind: the address and port are held by another process (an earlier engine, another server)",
			"free the port on that node (`ss -ltnp` names its holder; remove a leftover engine container), or choose other ports in the spec (ports.*)", true)
	}
	if trtCUDARuntimeOOM.MatchString(t) || tmCUDARuntimeOOM.MatchString(t) {
		return c.find(failure.CUDAOutOfMemory, "a CUDA allocation on "+c.onNode()+" failed: the GPU is out of memory",
			"lower gpu_memory_utilization, max_model_len or max_num_seqs, free the GPU of other processes (nvidia-smi), or use more GPUs (tensor or pipeline parallel)", true)
	}
	return heldout18Families(c)
}

// heldout18Families reads the formats heldout18 showed missed (the sources are at their regexps).
func heldout18Families(c ctx) *Finding {
	t := c.t
	if m := notDivisible.FindStringSubmatch(t); m != nil {
		return c.find(failure.InvalidParallelLayout, "a dimension of the model ("+m[1]+") does not divide by the parallel size ("+m[2]+"): its weights, vocabulary or heads cannot be split across that many ranks",
			"choose a tensor_parallel size that divides the model's dimensions (its heads, vocabulary and hidden size; a power of two that divides them), or split the rest by pipeline_parallel", true)
	}
	if rustNoSpace.MatchString(t) {
		return c.find(failure.DiskInsufficient, "a write on "+c.onNode()+" found its filesystem full (ENOSPC, from a Rust downloader: hf_xet or hf-hub): the model download or the HF cache ran out of space",
			fixDisk, true)
	}
	if c10dConnectTimeout.MatchString(t) {
		return c.find(failure.C10dUnreachable, "a rank on "+c.onNode()+" timed out connecting to torch's c10d store (the master address and port): nothing answered there",
			"check that rank 0 runs and listens on the master port, and that every node routes to the master address (the planned subnet's, not a NAT or loopback address)", true)
	}
	if m := containerdNoRuntime.FindStringSubmatch(t); m != nil {
		return c.find(failure.GPUsNotVisible, "containerd on "+c.onNode()+" has no runtime named "+m[1]+" (the NVIDIA container toolkit is not installed or not registered in containerd's config): the pod cannot get its GPUs",
			"install the NVIDIA container toolkit on that node and register it with containerd (nvidia-ctk runtime configure --runtime=containerd, then restart containerd)", true)
	}
	if dockerUnitFailed.MatchString(t) {
		return c.find(failure.DockerUnreachable, "the Docker engine on "+c.onNode()+" failed to start (systemd's start job for docker.service failed)",
			"read why with `journalctl -u docker.service` on that node (a bad daemon.json, a runtime entry that names a missing binary, a storage driver error), fix it and start docker again", true)
	}
	if m := workerFailed.FindStringSubmatch(t); m != nil {
		return c.find(failure.EngineDead, "vLLM's engine died: a worker failed ("+clip(m[1], 120)+")",
			"see the worker's traceback before this line; a lost rank (node down, network cut) is the usual cause", true)
	}
	if nvmlNotLoaded.MatchString(t) {
		return c.find(failure.GPUsNotVisible, "the NVIDIA device plugin on "+c.onNode()+" cannot load the driver's NVML library (libnvidia-ml) in its container: the node advertises no GPU",
			"install the NVIDIA driver on that node and make the NVIDIA runtime the container runtime the plugin's pod runs under (nvidia-ctk runtime configure, set as default), then restart the plugin", true)
	}
	if hookNotLegacy.MatchString(t) {
		return c.find(failure.GPUsNotVisible, "the NVIDIA container toolkit on "+c.onNode()+" runs in CDI or csv mode and refuses a `--gpus` request through its hook: the container cannot start with GPUs",
			"request the GPUs through the NVIDIA runtime (--runtime=nvidia with NVIDIA_VISIBLE_DEVICES, or CDI devices such as nvidia.com/gpu=all) instead of --gpus, or set the toolkit's mode to legacy", true)
	}
	if ftCUDARuntimeOOM.MatchString(t) {
		return c.find(failure.CUDAOutOfMemory, "a CUDA allocation on "+c.onNode()+" failed: the GPU is out of memory",
			"lower gpu_memory_utilization, max_model_len or max_num_seqs, free the GPU of other processes (nvidia-smi), or use more GPUs (tensor or pipeline parallel)", true)
	}
	if m := raySystemNoConnect.FindStringSubmatch(t); m != nil {
		to := "Ray's head"
		if m[1] != "" {
			to = "Ray's head at " + m[1]
		}
		return c.find(failure.GCSUnreachable, "a Ray process on "+c.onNode()+" cannot connect to "+to+" (gRPC: failed to connect to all addresses): the head is not running there, or the address is not reachable from this node",
			"start Ray's head before its clients and give them the head's address on the planned subnet (ray start --address, RAY_ADDRESS); check the port is open between the nodes", true)
	}
	if m := autoModelUnknown.FindStringSubmatch(t); m != nil {
		return c.find(failure.ModelUnsupported, "the image's transformers has no "+m[2]+" for the model's configuration "+m[1]+": the model needs a newer transformers or vLLM (or another model class)",
			"use an image whose vLLM and transformers support this model (vLLM's supported-models list names the release)", true)
	}
	if m := watchdogDump.FindStringSubmatch(t); m != nil {
		return c.find(failure.CollectiveTimeout, "torch's NCCL watchdog on "+c.onNode()+" dumps its state after a collective timed out (on "+m[1]+"): a peer rank stopped taking part (it died or hangs) or the link between the nodes stalls",
			"find the rank that failed first (its node's lines before the timeout); check the link between the nodes and that NCCL_SOCKET_IFNAME names the planned subnet's interface on every node", true)
	}
	if m := c10dHostNotFound.FindStringSubmatch(t); m != nil {
		return c.find(failure.C10dUnreachable, "a rank on "+c.onNode()+" cannot resolve the master address of torch's c10d store ("+clip(strings.TrimSpace(m[1]), 80)+")",
			"give every rank the master's address as an IP on the planned subnet (or a name every node resolves), and start the master first", true)
	}
	if m := hubNoSpace.FindStringSubmatch(t); m != nil {
		where := "its target directory"
		if m[2] != "" {
			where = m[2]
		}
		return c.find(failure.DiskInsufficient, "a Hugging Face download on "+c.onNode()+" needs "+m[1]+" MB but "+where+" has "+m[3]+" MB free: the download will fail with ENOSPC",
			fixDisk, true)
	}
	if m := hubConnectTimeout.FindStringSubmatch(t); m != nil {
		return c.find(failure.ModelOffline, "the node "+c.onNode()+" cannot connect to "+m[1]+" (the connection timed out): the hub is unreachable from it (no route, a firewall, or a proxy it needs)", fixOffline, true)
	}
	if v0EngineDead.MatchString(t) {
		return c.find(failure.EngineDead, "vLLM's engine died (its V0 engine process or loop): "+clip(strings.TrimSpace(payload(t)), 160),
			"see the lines before it for the engine's own error (an OOM, a lost rank); a loop silent past VLLM_RPC_TIMEOUT under load is also reported so", true)
	}
	return nil
}

// collectives reads torch's NCCL watchdog and NCCL's own socket and RDMA transport errors.
func collectives(c ctx) *Finding {
	t := c.t
	if m := watchdogTimeout.FindStringSubmatch(t); m != nil {
		op := "a collective"
		if m[2] != "" {
			op = "a " + m[2] + " collective"
		}
		if m[1] != "" {
			op += " (SeqNum " + m[1] + ")"
		}
		took := ""
		if m[3] != "" {
			took = " after " + m[3] + " ms"
		}
		return c.find(failure.CollectiveTimeout, op+" timed out"+took+": a peer rank stopped taking part (it died or hangs) or the network between the nodes stalls",
			"find the rank that failed first (its node's lines before the timeout); check the link between the nodes and that NCCL_SOCKET_IFNAME names the planned subnet's interface on every node", true)
	}
	if m := watchdogTimeAt.FindStringSubmatch(t); m != nil {
		return c.find(failure.CollectiveTimeout, "NCCL work "+m[1]+" timed out in torch's watchdog: a peer rank stopped taking part (it died or hangs) or the network between the nodes stalls",
			"find the rank that failed first (its node's lines before the timeout); check the link between the nodes and that NCCL_SOCKET_IFNAME names the planned subnet's interface on every node", true)
	}
	if watchdogWork.MatchString(t) {
		return c.find(failure.NCCLError, "torch's NCCL watchdog caught a failed or timed-out collective and takes the process down: "+clip(strings.TrimSpace(payload(t)), 160),
			"find the rank that failed first (its node's lines before this one); check the link between the nodes and NCCL_SOCKET_IFNAME", true)
	}
	if m := ncclSockFmt.FindStringSubmatch(t); m != nil {
		peer := m[1] + m[2] + m[3] + m[4]
		diag := "an NCCL socket to a peer failed on " + c.onNode()
		switch {
		case strings.Contains(t, "wrong type"):
			diag = "NCCL on " + c.onNode() + " accepted a connection of the wrong kind (another job or a port scanner on NCCL's ports, or ranks of two runs mixed)"
		case strings.Contains(t, "closed by remote peer"), strings.Contains(t, "reset by peer"):
			diag = "the NCCL peer " + peer + " closed or reset its connection: that rank failed first (see its node's lines), or the network between the nodes cut it"
		case peer != "":
			diag = "an NCCL socket to the peer " + peer + " failed on " + c.onNode()
		}
		return c.find(failure.NCCLError, diag+": "+clip(strings.TrimSpace(payload(t)), 160), fixNCCL, true)
	}
	if m := ncclProxyCall.FindStringSubmatch(t); m != nil {
		return c.find(failure.NCCLError, "NCCL on "+c.onNode()+" could not reach the proxy thread of rank "+m[1]+" ("+m[2]+"): that rank's process failed or its socket is unreachable", fixNCCL, true)
	}
	if ncclCudaOOM.MatchString(t) {
		return c.find(failure.CUDAOutOfMemory, "a CUDA call inside NCCL ran out of GPU memory on "+c.onNode()+" (NCCL's buffers did not fit next to the weights and KV cache)",
			"lower --gpu-memory-utilization (NCCL allocates outside it), or --max-model-len, or use more GPUs; check nvidia-smi for other processes on that GPU", true)
	}
	if m := ncclCudaFail.FindStringSubmatch(t); m != nil {
		return c.find(failure.NCCLError, "a CUDA call inside NCCL failed on "+c.onNode()+" ('"+m[1]+"'): a GPU or driver fault, or peer-to-peer access the GPUs do not support",
			"check the GPUs and driver on that node (nvidia-smi, dmesg for Xid errors); try NCCL_P2P_DISABLE=1 or NCCL_CUMEM_ENABLE=0 to rule out peer-to-peer transport", true)
	}
	if m := ibCompletion.FindStringSubmatch(t); m != nil {
		peer := "an NCCL peer"
		if m[1] != "" {
			peer = "the NCCL peer " + m[1]
		}
		return c.find(failure.NCCLError, "an RDMA transfer to "+peer+" failed (IB completion error): "+clip(strings.TrimSpace(payload(t)), 160), fixIB, true)
	}
	if m := ncclConnReturned.FindStringSubmatch(t); m != nil && !strings.Contains(t, "retrying") && !strings.Contains(t, "NCCL INFO") {
		diag := "NCCL on " + c.onNode() + " gave up connecting a socket to a peer"
		if m[1] != "" {
			diag = "NCCL on " + c.onNode() + " could not connect to the peer " + m[1] + " (" + strings.TrimSpace(m[2]) + "): that rank is not listening (it failed first) or the address is not reachable from this node"
		}
		return c.find(failure.NCCLError, diag, fixNCCL, true)
	}
	if m := ncclBackTrace.FindStringSubmatch(t); m != nil {
		return c.find(failure.NCCLError, "NCCL failed on "+c.onNode()+" (ncclResult "+m[3]+" at "+m[1]+":"+m[2]+"; the WARN lines before it name the cause)", fixNCCL, true)
	}
	if m := ofiCompletion.FindStringSubmatch(t); m != nil {
		return c.find(failure.NCCLError, "an RDMA request of NCCL's libfabric (OFI) plugin failed (RC "+m[1]+", "+m[3]+"): the peer is unreachable over the fabric or died",
			"check the fabric between the nodes (EFA or RDMA devices, security groups), or set NCCL_NET=Socket to fall back to sockets", true)
	}
	return nil
}

// mirror403 says whether t is a 403 on the hub's file URL from a host other than Hugging Face's own
// (a mirror named by HF_ENDPOINT), which hubMirror403 reads as gated rather than a refused token.
func mirror403(t string) bool {
	m := hubMirror403.FindStringSubmatch(t)
	return m != nil && !strings.Contains(m[1], "huggingface") && !strings.HasSuffix(m[1], "hf.co")
}

func containsAny(s string, words []string) bool {
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}
