package main

import (
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/shaperproxy/shaperproxy/internal/config"
)

// ensureDataDir creates the data directory (mode 0700) or, when it
// exists, takes group and other access away from it: it holds the CA key,
// the originals and the capture logs.
func ensureDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(dir, fi.Mode().Perm()&0o700|0o700); err != nil {
		return fmt.Errorf("data dir %s is mode %o and cannot be made private: %w", dir, fi.Mode().Perm(), err)
	}
	return nil
}

// routeRoots returns the system's certificate pool with the CAs of a
// route's ca_file added.
func routeRoots(r config.Route) (*x509.CertPool, error) {
	pemBytes, err := os.ReadFile(r.CAFile)
	if err != nil {
		return nil, fmt.Errorf("route %q: ca_file: %w", r.Name, err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("route %q: ca_file %s: no PEM certificate in it", r.Name, r.CAFile)
	}
	return pool, nil
}

// clientKeys returns the configured client keys; a key from the
// environment must be as long as one in the file.
func clientKeys(c config.Config, getenv func(string) string) ([]string, error) {
	keys := c.ClientKeyList(getenv)
	for _, k := range keys[len(c.ClientKeys):] {
		if len(k) < config.MinClientKeyLen {
			return nil, fmt.Errorf("client_keys_env: a key in $%s is shorter than %d characters", c.ClientKeysEnv, config.MinClientKeyLen)
		}
	}
	return keys, nil
}

// checkExposure refuses to serve a non-loopback listener without client
// keys unless the configuration says so explicitly. It returns the
// addresses served without a key off loopback, for a warning.
func checkExposure(c config.Config, keys []string) (open []string, err error) {
	if len(keys) > 0 {
		return nil, nil
	}
	for _, l := range []struct{ key, addr string }{{"listen", c.Listen}, {"admin_listen", c.AdminListen}} {
		if l.addr == "" || isLoopbackAddr(l.addr) {
			continue
		}
		if !c.AllowUnauthenticated {
			return nil, fmt.Errorf("%s: %s is not a loopback address and no client key is set: set client_keys (or client_keys_env), or allow_unauthenticated = true to serve it to anyone who can reach it", l.key, l.addr)
		}
		open = append(open, l.addr)
	}
	return open, nil
}

// isLoopbackAddr reports whether a listen address is on loopback only:
// a loopback IP or "localhost" (an empty host listens everywhere).
func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
