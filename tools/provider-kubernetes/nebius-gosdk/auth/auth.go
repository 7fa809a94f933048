// Package auth is mrguard's stand-in for the Nebius SDK's auth package.
package auth

// BearerToken is an IAM token.
type BearerToken struct {
	Token string
}

// ServiceAccountReader reads a service account's key.
type ServiceAccountReader interface{}

// NewPrivateKeyParser reads a key from its PEM.
func NewPrivateKeyParser(privateKey []byte, publicKeyID, serviceAccountID string) ServiceAccountReader {
	return struct{}{}
}
