// Package settings owns how a kuma-dp command's settings come together: one table names each
// setting once - its flag, environment variable and config file field - and Load layers
// them, defaults < config file (--config) < environment < flags, the same way for every
// subcommand. It also reads the config file (ReadFile), reporting every problem with its
// field path and line.
//
// It never judges a configuration as a whole (the configuration's own Validate does) and
// prints nothing: the command words the errors it returns.
package settings

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Setting is one setting of a command's configuration C.
type Setting[C any] struct {
	Flag  string // the flag, without "--"
	Short string // its one-letter form, if any
	Env   string // the environment variable; "" when the setting has none
	Field string // the field's path by JSON names, e.g. dns.proxyPort: the config file's key
	Usage string
	// Bind, when set, returns the value that parses into the setting's field of c; when nil,
	// the field is found by Field and bound by its type (see Table.Types). A fresh value's
	// first Set replaces the field, a later Set of a list adds to it (a repeated flag).
	Bind func(c *C) pflag.Value
}

// Table is a command's settings and how its config file is read.
type Table[C any] struct {
	Settings []Setting[C]
	// ConfigUsage is the help of --config; "" when the command takes no config file.
	ConfigUsage string
	// Scalars are the types of C written as one value in the config file that are not
	// strings, numbers or booleans (see ReadFile).
	Scalars Scalars
	// Types binds a field of a type other than string, bool, int, int64, time.Duration,
	// []string or map[string]string: given a pointer to the field, the value parsing into it.
	Types map[reflect.Type]func(field any) pflag.Value
}

// Lookup finds the setting with that flag name.
func (t *Table[C]) Lookup(flag string) (Setting[C], bool) {
	for _, s := range t.Settings {
		if s.Flag == flag {
			return s, true
		}
	}
	return Setting[C]{}, false
}

// ByField finds the setting of a config file field.
func (t *Table[C]) ByField(field string) (Setting[C], bool) {
	for _, s := range t.Settings {
		if s.Field == field {
			return s, true
		}
	}
	return Setting[C]{}, false
}

// bind returns the value parsing into s's field of c.
func (t *Table[C]) bind(s Setting[C], c *C) pflag.Value {
	if s.Bind != nil {
		return s.Bind(c)
	}
	f := reflect.ValueOf(c).Elem()
	for _, name := range strings.Split(s.Field, ".") {
		f = fieldByJSONName(f, name)
		if !f.IsValid() {
			panic(fmt.Sprintf("settings: --%s: no field %q in %T", s.Flag, s.Field, c))
		}
	}
	if mk, ok := t.Types[f.Type()]; ok {
		return mk(f.Addr().Interface())
	}
	v := ValueOf(f.Addr().Interface())
	if v == nil {
		panic(fmt.Sprintf("settings: --%s: field %s of type %s needs Table.Types or Bind", s.Flag, s.Field, f.Type()))
	}
	return v
}

func fieldByJSONName(v reflect.Value, name string) reflect.Value {
	if v.Kind() != reflect.Struct {
		return reflect.Value{}
	}
	for i := range v.NumField() {
		if jsonName(v.Type().Field(i)) == name {
			return v.Field(i)
		}
	}
	return reflect.Value{}
}

// Embed is table's setting of that flag for a configuration D holding table's configuration
// (found by get), so that a command reuses another's setting - its flag, environment variable
// and binding - without naming it again; usage, when not "", replaces the help.
func Embed[C, D any](table *Table[C], flag, usage string, get func(*D) *C) Setting[D] {
	s, ok := table.Lookup(flag)
	if !ok {
		panic("settings: Embed: no setting --" + flag)
	}
	if usage == "" {
		usage = s.Usage
	}
	return Setting[D]{Flag: s.Flag, Short: s.Short, Env: s.Env, Field: s.Field, Usage: usage,
		Bind: func(d *D) pflag.Value { return table.bind(s, get(d)) }}
}

// ValueOf returns pflag's value for a pointer to a string, bool, int, int64, time.Duration,
// []string (comma lists, repeatable) or map[string]string (k=v lists); nil for another type.
func ValueOf(p any) pflag.Value {
	fs := pflag.NewFlagSet("", pflag.ContinueOnError)
	switch p := p.(type) {
	case *string:
		fs.StringVar(p, "v", *p, "")
	case *bool:
		fs.BoolVar(p, "v", *p, "")
	case *int:
		fs.IntVar(p, "v", *p, "")
	case *int64:
		fs.Int64Var(p, "v", *p, "")
	case *time.Duration:
		fs.DurationVar(p, "v", *p, "")
	case *[]string:
		fs.StringSliceVar(p, "v", *p, "")
	case *map[string]string:
		fs.StringToStringVar(p, "v", *p, "")
	default:
		return nil
	}
	return fs.Lookup("v").Value
}

// Flags are a table's flags defined on a command's flag set: Parse records what each is
// given, Load applies it over the file and the environment.
type Flags[C any] struct {
	table  *Table[C]
	given  map[string]*given
	config *string
}

// given records a flag's uses; they are parsed by Load, in order, into the configuration.
type given struct {
	typ    string
	isBool bool
	def    string
	uses   []string
}

func (g *given) String() string {
	if len(g.uses) == 0 {
		return g.def
	}
	return strings.Join(g.uses, ",")
}
func (g *given) Set(s string) error { g.uses = append(g.uses, s); return nil }
func (g *given) Type() string       { return g.typ }
func (g *given) IsBoolFlag() bool   { return g.isBool }

// Define defines every setting of the table on fs (and --config when the table has a
// file), showing defaults' values in the help.
func (t *Table[C]) Define(fs *pflag.FlagSet, defaults C) *Flags[C] {
	f := &Flags[C]{table: t, given: map[string]*given{}}
	for _, s := range t.Settings {
		v := t.bind(s, &defaults)
		g := &given{typ: v.Type(), def: v.String()}
		if b, ok := v.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			g.isBool = true
		}
		if g.def == "[]" { // an empty list or map: no default worth showing
			g.def = ""
		}
		flag := fs.VarPF(g, s.Flag, s.Short, s.Usage)
		flag.DefValue = g.def
		if g.isBool {
			flag.NoOptDefVal = "true"
		}
		f.given[s.Flag] = g
	}
	if t.ConfigUsage != "" {
		f.config = fs.String("config", "", t.ConfigUsage)
	}
	return f
}

// Given reports whether the flag was on the command line.
func (f *Flags[C]) Given(flag string) bool {
	g, ok := f.given[flag]
	return ok && len(g.uses) > 0
}

// ConfigFile is the --config file given, or "".
func (f *Flags[C]) ConfigFile() string {
	if f.config == nil {
		return ""
	}
	return *f.config
}

// FileError is a config file that could not be read or holds bad values.
type FileError struct {
	Path string
	Err  error
}

func (e *FileError) Error() string { return fmt.Sprintf("--config %s: %v", e.Path, e.Err) }
func (e *FileError) Unwrap() error { return e.Err }

// ValueError is a flag's or an environment variable's value that does not parse.
type ValueError struct {
	Flag  string // the setting's flag, without "--"
	Env   string // set when the value came from the environment
	Value string
	Err   error
}

func (e *ValueError) Error() string {
	if e.Env != "" {
		return fmt.Sprintf("%s: %q: invalid value for --%s: %v", e.Env, e.Value, e.Flag, e.Err)
	}
	return fmt.Sprintf("--%s: %q: invalid value: %v", e.Flag, e.Value, e.Err)
}
func (e *ValueError) Unwrap() error { return e.Err }

// Load returns defaults with, over them in turn, the config file's values, the environment's
// (a variable is skipped when its flag is given) and the flags'. A file that does not read is
// a *FileError, returned alone; values that do not parse are *ValueErrors, every one of them
// joined (errors.Join), and the configuration returned keeps the earlier layer's value for
// each. getenv reports whether a variable is set.
func (f *Flags[C]) Load(defaults C, getenv func(string) (string, bool)) (C, error) {
	cfg := defaults
	if path := f.ConfigFile(); path != "" {
		if err := ReadFile(path, &cfg, f.table.Scalars); err != nil {
			return cfg, &FileError{Path: path, Err: err}
		}
	}
	var errs []error
	for _, s := range f.table.Settings {
		if v, ok := getenv(s.Env); ok && s.Env != "" && !f.Given(s.Flag) {
			if err := f.table.bind(s, &cfg).Set(v); err != nil {
				errs = append(errs, &ValueError{Flag: s.Flag, Env: s.Env, Value: v, Err: err})
			}
		}
	}
	for _, s := range f.table.Settings {
		val := f.table.bind(s, &cfg)
		for _, use := range f.given[s.Flag].uses {
			if err := val.Set(use); err != nil {
				errs = append(errs, &ValueError{Flag: s.Flag, Value: use, Err: err})
				break
			}
		}
	}
	return cfg, errors.Join(errs...)
}

// Failed lists the flags of the settings whose value did not parse in err (from Load).
func Failed(err error) map[string]bool {
	failed := map[string]bool{}
	var list []error
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		list = u.Unwrap()
	} else if err != nil {
		list = []error{err}
	}
	for _, e := range list {
		var ve *ValueError
		if errors.As(e, &ve) {
			failed[ve.Flag] = true
		}
	}
	return failed
}

// WriteSources writes the table of every setting's flag, environment variable and config
// file key, for a command's help.
func (t *Table[C]) WriteSources(w io.Writer) {
	flagW, envW := 0, 0
	for _, s := range t.Settings {
		flagW, envW = max(flagW, len(s.Flag)), max(envW, len(s.Env))
	}
	for _, s := range t.Settings {
		fmt.Fprintf(w, "  --%-*s %-*s %s\n", flagW, s.Flag, envW, s.Env, s.Field)
	}
}

// Parsed is a value of any type read by parse, shown in the help as typ (e.g. "port").
func Parsed[T any](p *T, typ string, parse func(string) (T, error)) pflag.Value {
	return &parsed[T]{p: p, typ: typ, parse: parse}
}

type parsed[T any] struct {
	p     *T
	typ   string
	parse func(string) (T, error)
}

func (v *parsed[T]) String() string { return fmt.Sprint(*v.p) }
func (v *parsed[T]) Type() string   { return v.typ }
func (v *parsed[T]) Set(s string) error {
	x, err := v.parse(s)
	if err == nil {
		*v.p = x
	}
	return err
}

// List is a list of items read by parse, written with sep between them (a comma list, say);
// its first Set replaces the list, later ones (a repeated flag) add to it.
func List[T any](list *[]T, sep, typ string, parse func(string) (T, error)) pflag.Value {
	return &listValue[T]{list: list, sep: sep, typ: typ, parse: parse}
}

type listValue[T any] struct {
	list  *[]T
	sep   string
	typ   string
	parse func(string) (T, error)
	set   bool
}

func (l *listValue[T]) Type() string { return l.typ }
func (l *listValue[T]) String() string {
	parts := make([]string, len(*l.list))
	for i, v := range *l.list {
		parts[i] = fmt.Sprint(v)
	}
	return "[" + strings.Join(parts, l.sep) + "]"
}
func (l *listValue[T]) Set(s string) error {
	var out []T
	for _, item := range strings.Split(s, l.sep) {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		v, err := l.parse(item)
		if err != nil {
			return err
		}
		out = append(out, v)
	}
	if !l.set {
		*l.list, l.set = nil, true
	}
	*l.list = append(*l.list, out...)
	return nil
}

// Not is a boolean flag setting the opposite of what it is given (--skip-x sets X false).
func Not(p *bool) pflag.Value { return (*not)(p) }

type not bool

func (n *not) String() string   { return strconv.FormatBool(!bool(*n)) }
func (n *not) Type() string     { return "bool" }
func (n *not) IsBoolFlag() bool { return true }
func (n *not) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q is not true or false", s)
	}
	*n = not(!b)
	return nil
}
