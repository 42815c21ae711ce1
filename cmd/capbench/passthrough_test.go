package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
)

// passThrough is a reverse proxy to the upstream target picks per request,
// flushing every write, with observe (if set) called on each request first.
// It reads each request body whole before forwarding it: once a reply's
// headers are written, net/http's server drains and closes the inbound
// body, and the transport's final read of a body it streams upstream can
// land after that and tear down the upstream connection mid-reply
// (golang/go#40747), which a spec would read as the proxy under test
// cutting the stream.
func passThrough(transport http.RoundTripper, target func(*http.Request) *url.URL, observe func(*http.Request)) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Transport:     transport,
		FlushInterval: -1,
		Rewrite: func(r *httputil.ProxyRequest) {
			if observe != nil {
				observe(r.In)
			}
			r.SetURL(target(r.In))
			if r.In.Body == nil || r.In.Body == http.NoBody {
				return
			}
			body, err := io.ReadAll(r.In.Body)
			if err != nil {
				body = nil // the upstream sees a short body and answers it
			}
			r.Out.Body = io.NopCloser(bytes.NewReader(body))
			r.Out.ContentLength = int64(len(body))
			r.Out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		},
	}
}
