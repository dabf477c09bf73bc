package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/tockwheel/tock/api"
)

// healthTimeout bounds the whole of a -healthcheck: dial, request and answer.
const healthTimeout = 5 * time.Second

// healthcheck asks the tockd serving at c.addr for /healthz, over HTTPS when c has a
// certificate, and returns nil when it answers 200. An address that listens on every interface
// (":7070", "0.0.0.0:7070", "[::]:7070") is asked on loopback. The certificate is not verified:
// the check is of a process on this machine, and /healthz needs no token, so nothing secret is
// sent.
func healthcheck(c config) error {
	host, port, err := net.SplitHostPort(c.addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", c.addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	scheme := "http"
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	if c.tlsCert != "" {
		scheme = "https"
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	}
	url := scheme + "://" + net.JoinHostPort(host, port) + api.PathHealth
	ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s: %s", url, res.Status, body)
	}
	return nil
}
