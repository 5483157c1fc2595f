// Package yamlconf decodes a YAML configuration file strictly and explains every problem by its
// key path: an unknown key (with the nearest known one), a value of the wrong type, a duration
// without a unit, a ${VAR} that is not set. It collects all of them instead of stopping at the
// first, so that `omnisat config check` can list everything to fix in one go.
package yamlconf

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Decode parses data into out, a pointer to a struct whose fields carry yaml tags. Before checking
// types, ${NAME} in scalar values is replaced by getenv(NAME) (${NAME:-fallback} gives fallback
// when NAME is unset or empty, $${ is a literal ${). The error joins one error per problem (see
// Problems); out then still receives every value that was fine, so that the caller can check
// those too and report everything at once.
func Decode(data []byte, out any, getenv func(string) string) error {
	rv := reflect.ValueOf(out)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("yamlconf: Decode needs a pointer to a struct, not %T", out)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return syntaxError(err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil // an empty file: every default
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil
	}
	c := checker{getenv: getenv, expanded: map[*yaml.Node]bool{}, inside: map[*yaml.Node]bool{}}
	if !c.walk(root, rv.Elem().Type(), "") {
		return errors.Join(c.problems...)
	}
	if err := root.Decode(out); err != nil {
		// The walk accepted something yaml.v3 does not: report it rather than guess.
		c.problems = append(c.problems, fmt.Errorf("decode: %w", err))
	}
	return errors.Join(c.problems...)
}

// Problems splits an error from Decode (or any errors.Join) into its single problems.
func Problems(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, Problems(e)...)
		}
		return out
	}
	return []error{err}
}

// Prefix puts prefix before every single problem in err, keeping them separate.
func Prefix(prefix string, err error) error {
	var out []error
	for _, e := range Problems(err) {
		out = append(out, fmt.Errorf("%s%w", prefix, e))
	}
	return errors.Join(out...)
}

// SyntaxError is a file that is not YAML at all: nothing was decoded.
type SyntaxError struct{ msg string }

func (e *SyntaxError) Error() string { return "not valid YAML: " + e.msg }

func syntaxError(err error) error {
	return &SyntaxError{msg: strings.TrimPrefix(err.Error(), "yaml: ")}
}

type checker struct {
	getenv   func(string) string
	problems []error
	// visits bounds the walk: aliases can make a small file a huge tree ("billion laughs").
	visits   int
	expanded map[*yaml.Node]bool // an aliased scalar is expanded once, not again per use
	// inside holds the anchored values being walked: an alias to one of them is a cycle
	// (`b: &b [*b]`), which decoding would expand without end.
	inside map[*yaml.Node]bool
}

// maxVisits is far more nodes than any configuration has.
const maxVisits = 100_000

func (c *checker) addf(n *yaml.Node, path, format string, a ...any) {
	where := path
	if where == "" {
		where = "(top level)"
	}
	c.problems = append(c.problems, fmt.Errorf("%s: %s (line %d)", where, fmt.Sprintf(format, a...), n.Line))
}

var (
	durationType    = reflect.TypeOf(time.Duration(0))
	unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()
)

// walk checks n against t and reports whether n can be decoded into t. Bad entries inside a
// mapping are removed from it, so that the rest decodes.
func (c *checker) walk(n *yaml.Node, t reflect.Type, path string) bool {
	n, leave, ok := c.enter(n, path)
	if !ok {
		return false
	}
	defer leave()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return true // `key:` with no value keeps the default
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return c.leaf(n, t, path)
	}
	switch t.Kind() {
	case reflect.Struct:
		return c.mapping(n, t, path)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			c.addf(n, path, "is %s; want a mapping of keys to values", describe(n))
			return false
		}
		ok := true
		for i := 0; i+1 < len(n.Content); i += 2 {
			ok = c.walk(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value)) && ok
		}
		return ok
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			c.addf(n, path, "is %s; want a list", describe(n))
			return false
		}
		ok := true
		for i, item := range n.Content {
			ok = c.walk(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)) && ok
		}
		return ok
	case reflect.Interface:
		return c.expandAll(n, path)
	default:
		return c.leaf(n, t, path)
	}
}

// mapping checks a YAML mapping against a struct: every key must be one of its fields.
func (c *checker) mapping(n *yaml.Node, t reflect.Type, path string) bool {
	if n.Kind != yaml.MappingNode {
		c.addf(n, path, "is %s; want a section of keys (key: value)", describe(n))
		return false
	}
	fields := structFields(t)
	seen := map[string]bool{}
	var kept []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		if seen[key] {
			c.addf(k, join(path, key), "appears twice")
			continue
		}
		seen[key] = true
		ft, known := fields[key]
		if !known {
			msg := "unknown key"
			if near := nearest(key, fields); near != "" {
				msg += fmt.Sprintf("; did you mean %q?", near)
			} else {
				msg += "; known keys: " + strings.Join(sortedKeys(fields), ", ")
			}
			c.addf(k, join(path, key), "%s", msg)
			continue
		}
		if c.walk(v, ft, join(path, key)) {
			kept = append(kept, k, v)
		}
	}
	n.Content = kept
	return true
}

func (c *checker) tooBig(n *yaml.Node) bool {
	c.visits++
	if c.visits == maxVisits {
		c.addf(n, "", "the document expands to more than %d values (aliases?)", maxVisits)
	}
	return c.visits >= maxVisits
}

// leaf checks one value against a scalar type (or a type that decodes itself).
func (c *checker) leaf(n *yaml.Node, t reflect.Type, path string) bool {
	if n.Kind == yaml.ScalarNode {
		if !c.expand(n, path) {
			return false
		}
	} else if !reflect.PointerTo(t).Implements(unmarshalerType) {
		c.addf(n, path, "is %s; want %s", describe(n), want(t))
		return false
	}
	if t == durationType {
		if tag := n.ShortTag(); tag == "!!int" || tag == "!!float" {
			if n.Value != "0" {
				c.addf(n, path, "%s has no unit; write a duration such as %ss or %sms", n.Value, n.Value, n.Value)
				return false
			}
			// A bare 0 needs no unit, but yaml.v3 decodes no number into a time.Duration:
			// give it the string Go parses.
			n.Tag, n.Value = "!!str", "0s"
		}
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.ShortTag() == "!!float" && t != durationType { // yaml.v3 would cut 0.5 to 0
			c.addf(n, path, "%q is not %s", n.Value, want(t))
			return false
		}
	}
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) || t == durationType {
			c.addf(n, path, "%q is not %s", n.Value, want(t))
		} else {
			c.addf(n, path, "%v", err) // the type's own message, which names the value
		}
		return false
	}
	return true
}

// enter counts a visit, follows an alias to its value and marks an anchored value as being
// walked until leave is called. ok is false when the document has grown too big, or (with the
// problem reported) when the alias leads back into a value that holds it.
func (c *checker) enter(n *yaml.Node, path string) (target *yaml.Node, leave func(), ok bool) {
	if c.tooBig(n) {
		return n, nil, false
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		if c.inside[n.Alias] {
			c.addf(n, path, "an alias refers to the value that holds it")
			return n, nil, false
		}
		n = n.Alias
	}
	if n.Anchor == "" || c.inside[n] {
		return n, func() {}, true
	}
	c.inside[n] = true
	return n, func() { delete(c.inside, n) }, true
}

// expandAll replaces variables in every scalar under n (free-form sections) and reports whether
// n can be decoded.
func (c *checker) expandAll(n *yaml.Node, path string) bool {
	n, leave, ok := c.enter(n, path)
	if !ok {
		return false
	}
	defer leave()
	switch n.Kind {
	case yaml.ScalarNode:
		return c.expand(n, path)
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			ok = c.expandAll(n.Content[i+1], join(path, n.Content[i].Value)) && ok
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			ok = c.expandAll(item, fmt.Sprintf("%s[%d]", path, i)) && ok
		}
	}
	return ok
}

// expand replaces ${VAR} in a scalar. A plain (unquoted) value is typed again after the change,
// so `port: ${PORT}` is a number when PORT is one.
func (c *checker) expand(n *yaml.Node, path string) bool {
	if c.expanded[n] || !strings.Contains(n.Value, "${") {
		return true
	}
	c.expanded[n] = true
	out, missing, err := Expand(n.Value, c.getenv)
	if err != nil {
		c.addf(n, path, "%v", err)
		return false
	}
	if len(missing) > 0 {
		c.addf(n, path, "${%s} is not set in the environment (use ${%s:-default} for a fallback)", missing[0], missing[0])
		return false
	}
	n.Value = out
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
		n.Tag = "" // plain: resolve the type from the new text
	}
	return true
}

// Expand replaces ${NAME} and ${NAME:-fallback} in s with getenv's values and returns the names
// that were unset (or empty) and had no fallback. $${ stands for a literal ${.
func Expand(s string, getenv func(string) string) (string, []string, error) {
	var b strings.Builder
	var missing []string
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), missing, nil
		}
		if i > 0 && s[i-1] == '$' { // $${ → ${
			b.WriteString(s[:i])
			b.WriteString("{")
			s = s[i+2:]
			continue
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", nil, fmt.Errorf("%q has ${ without a closing }", s)
		}
		ref := s[i+2 : i+end]
		name, fallback, hasFallback := strings.Cut(ref, ":-")
		if !validEnvName(name) {
			return "", nil, fmt.Errorf("${%s} is not a variable name (letters, digits, _)", ref)
		}
		b.WriteString(s[:i])
		v := ""
		if getenv != nil {
			v = getenv(name)
		}
		switch {
		case v != "":
			b.WriteString(v)
		case hasFallback:
			b.WriteString(fallback)
		default:
			missing = append(missing, name)
		}
		s = s[i+end+1:]
	}
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// structFields maps yaml keys to field types, descending into `,inline` fields.
func structFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			for k, v := range structFields(ft) {
				fields[k] = v
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = f.Type
	}
	return fields
}

// Keys lists every key path a struct type accepts, sections first-level and nested
// ("server.url", "mqtt.tls.ca_file"). Maps and lists end the path.
func Keys(t reflect.Type) []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		fields := structFields(t)
		for _, k := range sortedKeys(fields) {
			ft := fields[k]
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			path := join(prefix, k)
			out = append(out, path)
			if ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(unmarshalerType) && ft != durationType {
				walk(ft, path)
			}
		}
	}
	walk(t, "")
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a section of keys"
	case yaml.SequenceNode:
		return "a list"
	default:
		return strconv.Quote(n.Value)
	}
}

func want(t reflect.Type) string {
	if t == durationType {
		return "a duration (such as 500ms, 1s, 2m)"
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		if d, ok := reflect.New(t).Interface().(interface{ Want() string }); ok {
			return d.Want()
		}
		return "a valid value"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number ≥ 0"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a text value"
	}
	return t.String()
}

// nearest returns the known key closest to key when it is plausibly a typo of it.
func nearest(key string, fields map[string]reflect.Type) string {
	best, bestDist := "", 0
	for _, k := range sortedKeys(fields) {
		d := editDistance(key, k)
		if best == "" || d < bestDist {
			best, bestDist = k, d
		}
	}
	if best == "" || bestDist > 2 && bestDist*3 > len(key) {
		return ""
	}
	return best
}

// editDistance counts the insertions, deletions, substitutions and swaps of neighbours that turn
// a into b (optimal string alignment), so that "nmae" is one step from "name".
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

func sortedKeys(m map[string]reflect.Type) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
