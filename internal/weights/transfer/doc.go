// Package transfer moves a model's files from one node's agent to another's, for
// model.sync: from-head: a server on the head (Servers) serves exactly the files a copy
// needs, beneath the allowed mount they are in, to the copying nodes' addresses presenting
// their keys' secrets (Keys: history carries only the keys' hashes), and Copy on each
// other node fetches them into its own mount — resumable from partial files, verified by
// hash, and renamed into place (Hugging Face's blobs, snapshot links and refs written as
// huggingface_hub writes them). RemovePartial is a failed copy's cleanup.
//
// It is a package of its own, beside package weights rather than in it, because weights
// is the pure part — what a node holds and what it lacks, table-tested and recorded in
// workflow history — while this is I/O: sockets, HTTP and writes below a directory that
// containers also write. It is also not package activities: it knows nothing of Temporal
// or the node's policy. The activities (activities.Weights) check a request against the
// node's policy and signed intent, open the listener and the dialer in the node's network
// namespace and the directory beneath an allowed mount, and turn this package's errors
// (ErrCorrupt, ErrSourceLacks, ErrServerGone, ErrNotServed, ErrUnverifiable, confined's
// refusals) into the contract's types.
//
// Every path is opened through package confined: the server reads a model file following
// links only while they stay beneath its directory (a snapshot's ../../blobs/<hash>),
// and the copy writes without following any link.
package transfer
