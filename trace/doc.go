// Package trace reads LLM request traces in the Mooncake FAST'25 JSONL format and
// turns them into token sequences a KV-cache manager can replay.
//
// # Format
//
// One JSON object per line:
//
//	{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]}
//
// timestamp is the arrival time in milliseconds, or in Options.TimeUnit: traces
// from other tools stamp float seconds (TimeUnit time.Second) or nanoseconds
// (time.Nanosecond). It alone may have a fraction or an exponent; the other
// fields are JSON integers. Read rebases a file's timestamps to its earliest
// request, so a trace stamped with milliseconds since the epoch replays from 0
// (Report.Base keeps the offset), converts them to whole milliseconds (exactly
// for integers; rounded to the nearest millisecond), and rejects a timestamp
// that, rebased and scaled, overflows a time.Duration (a nanosecond trace read
// as milliseconds, if it spans over about 2.5 hours): a *ParseError for its
// line. A shorter nanosecond trace read as milliseconds is not refused, only a
// million times too slow: set TimeUnit. hash_ids are remapped prefix block hashes with BlockTokens (512) tokens per
// block: equal ids mean a reusable prefix block, and every id identifies its whole
// prefix.
//
// The file is JSON Lines: one object a line, lines ending in "\n" or
// "\r\n" (the last may end the file without one), blank lines skipped. A
// UTF-8 byte order mark before the first line is dropped, and a gzip file
// (one member or several, as Dynamo writes .jsonl.gz) is decompressed as it
// is read, its line numbers counted in the decompressed text. Input in
// another compression Read recognises (zstd, xz, bzip2, zip) is refused
// before any line with ErrCompressed, and UTF-16 text with ErrUTF16; a JSON
// array of requests, or objects pretty-printed over several lines, fails on
// line 1 with an error saying so (with OnError Skip such lines are skipped
// and counted, and the Report's first error says so).
//
// # Errors
//
// A malformed line yields a *ParseError naming the line number and the field. With
// OnError set to Skip the reader counts the line in Report.Skipped and goes on;
// with Stop (the default) reading ends at the first bad line. A line holding
// anything after its JSON object, naming a field twice, giving a number as a
// string or a hash id as null, longer than MaxLineBytes (ErrLineTooLong), or
// claiming an input_length over Options.MaxInputTokens (ErrTooManyTokens,
// 16M tokens by default: TokensOf allocates them all), is malformed too. Invalid Options are refused before any line is read, with an
// error wrapping ErrBadOptions (not ErrMalformed, which is for lines).
//
// # Tokens
//
// The traces carry no token ids. Tokens maps each hash id to a deterministic block
// of token ids (equal ids give equal tokens, different ids different tokens with
// overwhelming probability), so a trace can drive a real prefix cache. Tokens
// assumes Mooncake's 512 tokens a hash id; a trace read with another
// Options.BlockTokens needs TokensOf with that block size.
//
// # Usage
//
//	reqs, rep, err := trace.ReadFile("conversation_trace.jsonl", trace.Options{OnError: trace.Skip})
//	if err != nil { ... }
//	toks := trace.Tokens(reqs[0], 128256)
//
// Sample returns the embedded default workload: the first 600 requests of the
// Mooncake conversation trace (kvcache-ai/Mooncake, Apache-2.0).
package trace
