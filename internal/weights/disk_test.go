package weights

import (
	"reflect"
	"testing"
)

func TestCheckDisk(t *testing.T) {
	shards := []File{{Name: "a.safetensors", Size: 300e9}, {Name: "b.safetensors", Size: 176e9}}
	cases := []struct {
		name  string
		disks []Disk
		want  []string
	}{
		{"room everywhere", []Disk{{Node: "node-b", Dir: "/models", Free: 500e9, Receive: shards}}, nil},
		{"exactly enough", []Disk{{Node: "node-b", Dir: "/models", Free: 476e9, Receive: shards}}, nil},
		{"nothing to receive on a full disk", []Disk{{Node: "node-b", Dir: "/models", Free: 0}}, nil},
		{"one byte short", []Disk{{Node: "node-b", Dir: "/models", Free: 476e9 - 1, Receive: shards}},
			[]string{"node-b: /models needs 476.0 GB for 2 files of the model and has 476.0 GB free (1 B short)"}},
		{"two nodes short, named in order", []Disk{
			{Node: "node-c", Dir: "/hf", Free: 100e9, Receive: shards},
			{Node: "node-a", Dir: "/models", Free: 1e12, Receive: shards},
			{Node: "node-b", Dir: "/models", Free: 100e9, Receive: shards[1:]},
		}, []string{
			"node-b: /models needs 176.0 GB for 1 file of the model and has 100.0 GB free (76.0 GB short)",
			"node-c: /hf needs 476.0 GB for 2 files of the model and has 100.0 GB free (376.0 GB short)",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, p := range CheckDisk(c.disks) {
				if p.Kind != KindDisk {
					t.Errorf("kind %q", p.Kind)
				}
				got = append(got, p.Message)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}
