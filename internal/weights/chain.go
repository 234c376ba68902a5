package weights

import "sort"

// Link is one hop of a copy chain: To receives Files from From's model server, which
// serves Serve (the names of Files) from its own directory. Relay are the files of Serve
// that From is itself receiving during the same copy, with their sizes: From's server
// forwards those as they arrive and releases a file's last byte only once From has
// verified the file and placed it (transfer.Serve.Relay).
type Link struct {
	From  string           `json:"from"`
	To    string           `json:"to"`
	Files []File           `json:"files"`
	Serve []string         `json:"serve"`
	Relay map[string]int64 `json:"relay,omitempty"`
}

// Chain orders a copy as a chain: head → n1 → n2 …, the nodes that lack files in the
// order given (the spec's), each receiving from the one before it while it forwards to
// the one after. The head's link then carries one copy however many nodes receive it,
// and every link about one copy (what a node already holds it serves from disk, what it
// lacks it relays). A node that lacks nothing is not in the chain. The result is pure
// and ordered, so it is the same on a workflow's replay.
func Chain(head string, order []string, lacking map[string][]File) []Link {
	var links []Link
	from := head
	var fromLacks map[string]bool
	for _, n := range order {
		files := lacking[n]
		if n == head || len(files) == 0 {
			continue
		}
		l := Link{From: from, To: n, Files: files, Serve: make([]string, 0, len(files))}
		for _, f := range files {
			l.Serve = append(l.Serve, f.Name)
			if fromLacks[f.Name] {
				if l.Relay == nil {
					l.Relay = map[string]int64{}
				}
				l.Relay[f.Name] = f.Size
			}
		}
		sort.Strings(l.Serve)
		links = append(links, l)
		from = n
		fromLacks = make(map[string]bool, len(files))
		for _, f := range files {
			fromLacks[f.Name] = true
		}
	}
	return links
}
