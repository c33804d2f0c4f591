// Package capture stores the wire of the proxy in append-only, compressed
// segment files and reads it back from the tail.
//
// The proxy hands records to a Writer (Enqueue never blocks: a full queue
// drops the record and counts it); one goroutine batches them into zstd
// frames and appends the frames to the current segment file:
//
//	w, err := capture.Open(capture.Options{Dir: dir})
//	...
//	w.Enqueue(capture.Record{Kind: capture.KindRequest, Call: id, Data: body, ...})
//	w.Enqueue(capture.Record{Kind: capture.KindEvent, Call: id, Seq: 0, Data: ev.Raw})
//	...
//	err = w.Close()
//
// The proxy's Observer queues a call's records in their place but without
// waking the writer, which takes them when they pile up (batchMin of
// them, or half the queue's room or bytes), on a Flush or Close, and at
// the latest FlushInterval after the first of them (one timer); a frame
// is written at the latest FlushInterval after its oldest record was
// queued (a held answer's records count from when they were held). Waking the
// writer for each call would put nothing on disk sooner (frames are
// written on that timer) and would cost a thread's wake-up per call (a
// stream's events woke it every few milliseconds), CPU that on a small
// machine is taken from the traffic. The answer to a non-stream request,
// when small, has its records handed over together at its end.
//
// Nothing the disk does holds up traffic. A failed write loses its frame
// (counted in WriterStats.Lost) and the writer backs off, then tries again
// by itself; the losses, and the records a full queue dropped, go into the
// log as a KindDrops record as soon as a frame is written again, and to
// Options.Logger as one warning per ReportEvery at most, with the counts.
//
// A Reader finds the last records without reading a segment from its start,
// because every frame ends with a fixed-size trailer that gives its length:
//
//	r, err := capture.OpenReader(dir)
//	defer r.Close()
//	last, err := r.Tail(100, capture.Filter{})
//
// # On-disk format
//
// A segment file "capture-NNNNNNNNNNNN.zst" is a valid zstd stream (zstdcat
// prints its records) made of:
//
//	segment header   skippable frame 0x184D2A5C, 40-byte payload
//	                 ("SPCAPSEG", version, segment number, creation time, CRC)
//	frame*           header  skippable frame 0x184D2A5D, 8-byte payload:
//	                         compressed length, CRC of that length
//	                 body    one independent zstd frame holding whole records
//	                 trailer skippable frame 0x184D2A5E, 44-byte payload:
//	                         "SPCF", version, compressed and raw length,
//	                         record count, first blob ordinal and blob count,
//	                         newest record time, CRC-32C of the body, CRC-32C
//	                         of the trailer
//
// A reader walks forward with the headers and backward with the trailers.
// Each frame is written with one write call. A frame whose trailer or body
// checksum does not match is torn (a crash in the middle of a write) or
// corrupt: readers skip it by searching for the next valid trailer. A Writer
// never appends to an existing file: after a restart or a write error it
// starts a new segment.
//
// Inside a frame, records follow each other as a uvarint length and a body:
// a kind byte, a flags byte and protobuf-like tagged fields (unknown tags
// are skipped, so fields can be added).
//
// # Requests store only what is new
//
// Agents re-send the whole history with every request. The Writer stores
// each distinct element of a request's "messages" (or "input") array, and
// any other top-level value of 1 KiB or more (tools, system), once per
// segment as a blob record keyed by its SHA-256. The request itself becomes
// a skeleton: the literal bytes between the blobs and, per blob, its
// ordinal in the segment (delta-encoded, so a growing history costs about a
// byte per message before compression). Readers rebuild the body byte for
// byte. Segments are self-contained: a blob is written again in every
// segment that references it, so retention can delete any old segment.
//
// To resolve a blob, a reader finds its frame from the blob ordinal ranges
// in the trailers (walking back over trailers only, 52 bytes each, no
// decompression), remembers the ranges of the frames it has walked over,
// and keeps recently decompressed frames in a bounded cache. The trade-off:
// no side index file to keep consistent with the segment (a crash cannot
// make them disagree), at the cost of a walk over the trailers back to the
// oldest blob of a rebuilt request (bounded by the segment size, not the
// log size) and of decompressing every frame that holds one of its blobs.
package capture
