package logscan

import "testing"

// BenchmarkClassify is the classifier's cost per line over every line of the table and
// both held-out sets, failures and ordinary lines alike.
func BenchmarkClassify(b *testing.B) {
	var lines []Line
	for _, r := range loadRealLines(b) {
		lines = append(lines, Parse(r.Line))
	}
	for _, file := range []string{"testdata/heldout_lines.json", "testdata/heldout2_lines.json"} {
		for _, r := range loadRows(b, file) {
			lines = append(lines, Parse(r.Line))
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Classify(lines[i%len(lines)])
	}
}

// BenchmarkFamilies is the part of BenchmarkClassify's cost that issue 38's families add.
func BenchmarkFamilies(b *testing.B) {
	var cs []ctx
	for _, r := range loadRealLines(b) {
		l := Parse(r.Line)
		cs = append(cs, ctx{l: l, t: l.Text, node: l.Node()})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		families(cs[i%len(cs)])
	}
}
