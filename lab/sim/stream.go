package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The OpenAI API's streamed answers (`"stream": true`), as vLLM writes them: server-sent
// events, one `data: JSON\n\n` per engine output, then `data: [DONE]\n\n`
// (vllm/entrypoints/openai/completion/serving.py completion_stream_generator and
// chat_completion/serving.py chat_completion_stream_generator, vllm-project/vllm at
// 030ea52effcb05071543c8c42b8f0145e94cee43; FastAPI's StreamingResponse with media type
// text/event-stream). A chunk is the choice's delta with finish_reason null until the last
// ("length": the lab's outputs always stop at max_tokens); with stream_options.include_usage
// a last chunk of empty choices carries the usage. An error once the stream began is one
// more event, {"error": {...}}, before [DONE] (create_streaming_error_response).
//
// The lab's engine returns a request's tokens together (one step, enginecore.go); the API
// server streams them one chunk a token, flushed each, as vLLM's output processor hands
// them on when the engine batches one token a step.

// streamOptions is the request's stream_options.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// sse writes server-sent events, flushed one by one.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}
}

// event writes one `data: JSON` event; false when the client is gone.
func (s *sse) event(v any) bool {
	b, _ := json.Marshal(v)
	return s.raw(string(b))
}

func (s *sse) raw(data string) bool {
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", data); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}

// tokens splits the lab's output text into its tokens, each with its leading space, as a
// detokenizer hands on deltas.
func tokens(text string) []string {
	var out []string
	for _, w := range strings.Fields(text) {
		out = append(out, " "+w)
	}
	return out
}

// streamCompletion is completion_stream_generator for one prompt and one choice.
func (a *apiServer) streamCompletion(w http.ResponseWriter, model, text string, promptTokens int, opt *streamOptions, dead bool) {
	s := newSSE(w)
	id, created := "cmpl-"+randomHex(32), time.Now().Unix()
	if dead {
		a.streamError(s)
		return
	}
	toks := tokens(text)
	for i, t := range toks {
		var finish any
		if i == len(toks)-1 {
			finish = "length"
		}
		if !s.event(map[string]any{"id": id, "object": "text_completion", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "text": t, "logprobs": nil, "finish_reason": finish, "stop_reason": nil}}}) {
			return
		}
	}
	if opt != nil && opt.IncludeUsage {
		s.event(map[string]any{"id": id, "object": "text_completion", "created": created, "model": model, "choices": []any{},
			"usage": map[string]int{"prompt_tokens": promptTokens, "completion_tokens": len(toks), "total_tokens": promptTokens + len(toks)}})
	}
	s.raw("[DONE]")
}

// streamChat is chat_completion_stream_generator for one choice: a first chunk with the
// assistant's role and empty content, then one a token, the last with its finish_reason.
func (a *apiServer) streamChat(w http.ResponseWriter, model, text string, promptTokens int, opt *streamOptions, dead bool) {
	s := newSSE(w)
	id, created := "chatcmpl-"+randomHex(32), time.Now().Unix()
	if dead {
		a.streamError(s)
		return
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
	}
	if !s.event(chunk(map[string]any{"role": "assistant", "content": ""}, nil)) {
		return
	}
	toks := tokens(text)
	for i, t := range toks {
		var finish any
		if i == len(toks)-1 {
			finish = "length"
		}
		if !s.event(chunk(map[string]any{"content": t}, finish)) {
			return
		}
	}
	if opt != nil && opt.IncludeUsage {
		s.event(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": []any{},
			"usage": map[string]int{"prompt_tokens": promptTokens, "completion_tokens": len(toks), "total_tokens": promptTokens + len(toks)}})
	}
	s.raw("[DONE]")
}

// streamError is the error event of a stream whose engine died, then [DONE].
//   - Python: the generator's `except Exception` yields create_streaming_error_response(e):
//     json.dumps of the ErrorResponse's model_dump(), with json.dumps's default separators
//     (", " and ": "), so unlike a response body this JSON has spaces
//     (vllm/entrypoints/openai/completion/serving.py completion_stream_generator,
//     vllm/entrypoints/openai/engine/serving.py create_streaming_error_response, vllm-project/vllm
//     at 619e4b31da7791a6ea4f6724fe45b54556b5a8fa).
//   - Rust: the chunk stream's Err(error) becomes bail_server_error!("{}",
//     error.to_report_string()), sent by the SSE stream as one `data:` event of the
//     ErrorResponse's compact JSON (Event::json_data), then `data: [DONE]`
//     (rust/src/server/src/routes/openai/completions.rs completion_sse_stream,
//     chat_completions.rs chat_completion_sse_stream).
func (a *apiServer) streamError(s *sse) {
	if a.rust {
		s.raw(string(compactJSON(rustServerError(rustEngineDeadMessage))))
	} else {
		s.raw(pythonDumps(errorBody{errorInfo{Message: engineDeadMessage, Type: "InternalServerError", Code: http.StatusInternalServerError}}))
	}
	s.raw("[DONE]")
}

// pythonDumps is json.dumps(body.model_dump()) with Python's default separators.
func pythonDumps(b errorBody) string {
	str := func(v string) string { return string(compactJSON(v)) }
	param := "null"
	if b.Error.Param != nil {
		param = str(*b.Error.Param)
	}
	return fmt.Sprintf(`{"error": {"message": %s, "type": %s, "param": %s, "code": %s}}`,
		str(b.Error.Message), str(b.Error.Type), param, compactJSON(b.Error.Code))
}
