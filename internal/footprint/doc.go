// Package footprint holds BenchmarkFootprint (make footprint): what the real omnisat binary
// costs the machine, measured from the outside as issue 15 measured the MiniCPM-o project's
// Python probe. It lives in a package of its own so that the measuring process is pure Go and
// maps none of the libraries omnisat maps (which would otherwise count as shared, not private,
// memory of omnisat).
package footprint
