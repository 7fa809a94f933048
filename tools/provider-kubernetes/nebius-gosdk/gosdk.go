// Package gosdk is mrguard's stand-in for the Nebius SDK (see go.mod).
package gosdk

import (
	"context"
	"errors"

	"github.com/nebius/gosdk/auth"
)

// SDK would hold a Nebius client; none is ever built here.
type SDK struct{}

// Option configures New.
type Option func()

// Credentials name how to authenticate.
type Credentials struct{}

// ServiceAccountReader takes a service account's key.
func ServiceAccountReader(auth.ServiceAccountReader) Credentials { return Credentials{} }

// WithCredentials sets the credentials.
func WithCredentials(Credentials) Option { return func() {} }

// New always fails: this build of provider-kubernetes has no Nebius SDK.
func New(context.Context, ...Option) (*SDK, error) {
	return nil, errors.New("Nebius credentials are not supported: this provider-kubernetes was built by mrguard's tests without the Nebius SDK")
}

// BearerToken is never reached: New returns no SDK.
func (*SDK) BearerToken(context.Context) (auth.BearerToken, error) {
	return auth.BearerToken{}, errors.New("no Nebius SDK")
}
