package activities

import (
	"reflect"
	"testing"
)

func TestParseRayStatus(t *testing.T) {
	v2 := `======== Autoscaler status: 2025-05-09 05:39:16.967610 ========
Node status
---------------------------------------------------------------
Active:
 1 node_a9d14d6a94d5e77fbdafdb8802dada067a37417f2f7ad98426aa3eb7
 1 node_4122ac6d486c994414de5ed9704c329002b5ec596fb38dd0806fe1fd
Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Total Usage:
 0.0/40.0 CPU
 1.0/2.0 GPU
 0B/33.53GiB memory
 0B/46.26GiB object_store_memory

Total Constraints:
 (no request_resources() constraints)
Total Demands:
 {'GPU': 1.0, 'node:192.168.200.12': 0.001} * 1, {'GPU': 1.0} * 1 (PACK): 1+ pending placement groups
`
	old := `======== Autoscaler status: 2024-01-02 03:04:05.000000 ========
Node status
---------------------------------------------------------------
Healthy:
 1 node_aaaa
Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Usage:
 0.0/20.0 CPU
 0.0/1.0 GPU

Demands:
 (no resource demands)
`
	for _, tc := range []struct {
		name, text string
		want       rayStatus
		err        bool
	}{
		{"autoscaler v2 with a stuck group", v2, rayStatus{Active: 2, GPUsUsed: 1, GPUsTotal: 2,
			Demands: []string{"{'GPU': 1.0, 'node:192.168.200.12': 0.001} * 1, {'GPU': 1.0} * 1 (PACK): 1+ pending placement groups"}}, false},
		{"older format", old, rayStatus{Active: 1, GPUsTotal: 1}, false},
		{"garbage", "ConnectionError: Could not find any running Ray instance.", rayStatus{}, true},
		{"empty", "", rayStatus{}, true},
	} {
		got, err := parseRayStatus(tc.text)
		if (err != nil) != tc.err || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, %v; want %+v (error %v)", tc.name, got, err, tc.want, tc.err)
		}
	}
}
