package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// CA file names inside the data directory.
const (
	CACertFile = "ca.pem"
	CAKeyFile  = "ca-key.pem"
)

// InitCA writes a new local CA (certificate and ECDSA P-256 key, both mode
// 0600) into dir unless one is already there. It returns the certificate's
// path and whether it was created now.
func InitCA(dir string) (certPath string, created bool, err error) {
	certPath = filepath.Join(dir, CACertFile)
	keyPath := filepath.Join(dir, CAKeyFile)
	if _, err := os.Stat(certPath); err == nil {
		if _, err := LoadCA(dir); err != nil {
			return certPath, false, fmt.Errorf("existing CA in %s: %w", dir, err)
		}
		return certPath, false, nil
	}
	if err := privateDir(dir); err != nil {
		return "", false, err
	}
	if fi, err := os.Stat(keyPath); err == nil {
		// A key without its certificate: another init writing them now,
		// or one that stopped between the two files (the key is of no use
		// alone: it goes).
		if time.Since(fi.ModTime()) < orphanKeyAge {
			return certPath, false, awaitCA(dir, certPath)
		}
		if err := os.Remove(keyPath); err != nil {
			return "", false, fmt.Errorf("ca: %w", err)
		}
	}
	certPEM, keyPEM, err := newCA(time.Now())
	if err != nil {
		return "", false, err
	}
	if err := writeFile0600(keyPath, keyPEM); err != nil {
		if errors.Is(err, fs.ErrExist) { // another init got there first: its CA is the CA
			return certPath, false, awaitCA(dir, certPath)
		}
		return "", false, err
	}
	// The certificate appears whole or not at all: an init that finds it
	// takes the CA as made (and the key, written before it, whole).
	if err := writeRenamed0600(certPath, certPEM); err != nil {
		return "", false, err
	}
	return certPath, true, nil
}

// orphanKeyAge is how old a CA key without its certificate must be to be
// taken for one left by an init that stopped, not one being written.
const orphanKeyAge = 10 * time.Second

// awaitCA waits for the certificate another init is writing and checks
// the CA it makes.
func awaitCA(dir, certPath string) error {
	for deadline := time.Now().Add(orphanKeyAge); ; {
		if _, err := os.Stat(certPath); err == nil { // renamed into place whole, after the key
			_, err := LoadCA(dir)
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ca: %s has a key being written by another process and no certificate yet; run ca init again", dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// privateDir creates dir mode 0700, or takes group and other access away
// from it when it exists: it will hold the CA's key.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("ca: %w", err)
	}
	fi, err := os.Stat(dir)
	if err == nil && fi.Mode().Perm()&0o077 != 0 {
		err = os.Chmod(dir, fi.Mode().Perm()&0o700|0o700)
	}
	if err != nil {
		return fmt.Errorf("ca: %s cannot be made private: %w", dir, err)
	}
	return nil
}

// LoadCA reads the CA written by InitCA.
func LoadCA(dir string) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no CA in %s (run `shaperproxy ca init`): %w", dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	return &cert, nil
}

func newCA(now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, fmt.Errorf("ca: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "shaperproxy local CA", Organization: []string{"shaperproxy"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: %w", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	return certPEM, keyPEM, nil
}

// writeRenamed0600 writes data to a new file (mode 0600) beside path and
// renames it to path.
func writeRenamed0600(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".ca-*.tmp")
	if err != nil {
		return fmt.Errorf("ca: %w", err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("ca: %w", err)
	}
	return nil
}

// writeFile0600 writes data to a new file that only the owner can read.
func writeFile0600(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("ca: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("ca: %w", err)
	}
	return f.Close()
}
