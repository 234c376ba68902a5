package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// Environment knobs of the simulator (none of them exist upstream).
const (
	envTimeScale    = "TPDEPLOY_SIM_TIME_SCALE"     // multiplies upstream waits and timeouts (default 1)
	envShards       = "TPDEPLOY_SIM_SHARDS"         // checkpoint shards rank 0 loads (default 8)
	envShardSeconds = "TPDEPLOY_SIM_SHARD_SECONDS"  // seconds per shard (default 0.5)
	envGPUs         = "TPDEPLOY_SIM_GPUS"           // GPUs a node has when --num-gpus is absent (default 1)
	envIgnoreNodeIP = "TPDEPLOY_SIM_IGNORE_NODE_IP" // `ray start` ignores --node-ip-address (a broken wrapper)
	envStoreTimeout = "TPDEPLOY_SIM_STORE_TIMEOUT"  // c10d store timeout in seconds before scaling (default 600)
	// envRayDefault says Ray was installed with its dashboard dependencies (ray[default]):
	// the dashboard serves HTTP (the state API). vLLM's images install a minimal Ray.
	envRayDefault = "TPDEPLOY_SIM_RAY_DEFAULT"
)

func envFloat(name string, def float64) float64 {
	v, err := strconv.ParseFloat(os.Getenv(name), 64)
	if err != nil || v < 0 {
		return def
	}
	return v
}

// scaled shortens an upstream duration by the lab's time scale.
func scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * envFloat(envTimeScale, 1))
}

func randomHex(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// out serialises whole lines onto stdout: several goroutines print.
var outMu sync.Mutex

func emit(s string) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Fprintln(os.Stdout, s)
}

// rayLog prints a line the way Ray's CLI logs without a TTY (as `docker logs` shows it).
func rayLog(level, where, msg string) {
	now := time.Now()
	emit(fmt.Sprintf("%s,%03d\t%s %s -- %s", now.Format("2006-01-02 15:04:05"), now.Nanosecond()/1e6, level, where, msg))
}

// rayCppLog prints a line the way Ray's C++ components log: `[time level pid tid] file:line: msg`.
func rayCppLog(level, where, msg string) {
	now := time.Now()
	emit(fmt.Sprintf("[%s,%03d %s %d %d] %s: %s", now.Format("2006-01-02 15:04:05"), now.Nanosecond()/1e6, level, os.Getpid(), os.Getpid(), where, msg))
}

// vllmLog prints a line in vLLM's logger format with its process prefix.
func vllmLog(proc, level, where, msg string) {
	emit(fmt.Sprintf("(%s pid=%d) %s %s [%s] %s", proc, os.Getpid(), level, time.Now().Format("01-02 15:04:05"), where, msg))
}

// routeSource is the address the kernel would use to reach dst: a UDP connect sends no
// packet but makes the kernel choose a route and a source address, as Ray and vLLM do.
func routeSource(dst string) (string, error) {
	c, err := net.Dial("udp", dst)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// rayNodeIP is Ray's node-IP auto-detection: the route to 8.8.8.8, then the IPv6 resolver,
// then the first IPv4 the hostname resolves to, else loopback.
func rayNodeIP() string {
	for _, dst := range []string{"8.8.8.8:53", "[2001:4860:4860::8888]:53"} {
		if ip, err := routeSource(dst); err == nil {
			return ip
		}
	}
	if h, err := os.Hostname(); err == nil {
		if addrs, err := net.LookupIP(h); err == nil {
			for _, a := range addrs {
				if a.To4() != nil {
					return a.String()
				}
			}
		}
	}
	return "127.0.0.1"
}

// vllmHostIP is vLLM's get_ip(): VLLM_HOST_IP, else the route to 8.8.8.8, else 0.0.0.0.
func vllmHostIP() string {
	if ip := os.Getenv("VLLM_HOST_IP"); ip != "" {
		return ip
	}
	if ip, err := routeSource("8.8.8.8:80"); err == nil {
		return ip
	}
	emit(fmt.Sprintf("(APIServer pid=%d) %s", os.Getpid(), getIPWarning))
	return "0.0.0.0"
}

// fatal prints a Python-style traceback tail and exits like the upstream process.
func fatal(proc, exc, msg string) {
	emit(fmt.Sprintf("(%s pid=%d) Traceback (most recent call last):", proc, os.Getpid()))
	emit(fmt.Sprintf("(%s pid=%d) %s: %s", proc, os.Getpid(), exc, msg))
	os.Exit(1)
}

// getIPWarning is get_ip()'s fallback warning as Python's warnings module prints it to
// stderr (vllm/utils/network_utils.py: warnings.warn("Failed to get the IP address, using
// 0.0.0.0 by default." "The value can be set by the environment variable" " VLLM_HOST_IP or
// HOST_IP.", stacklevel=2): the caller's file and line, the category, the text (no space
// after "default.").
const getIPWarning = "/usr/local/lib/python3.12/dist-packages/vllm/utils/network_utils.py:64: UserWarning: Failed to get the IP address, using 0.0.0.0 by default.The value can be set by the environment variable VLLM_HOST_IP or HOST_IP."
