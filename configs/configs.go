// Package configs holds the configuration files shipped with omnisat: the commented example
// (also installed as /etc/omnisat/omnisat.yaml by the package) and the demo.
package configs

import _ "embed"

//go:embed omnisat.example.yaml
var example string

// Example is the fully commented example configuration, printed by `omnisat config example`.
func Example() string { return example }
