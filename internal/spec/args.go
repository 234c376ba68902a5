package spec

import (
	"strings"
	"unicode"
)

// Arg is one option of model.extra_args as vLLM's parser reads it.
type Arg struct {
	// Index is the option's place in extra_args (its field: model.extra_args[Index]).
	Index int
	// Flag is the option's name as vLLM's parser reads it: a long option's underscores
	// before the first "." are dashes (FlexibleArgumentParser.parse_args, vllm/utils/
	// argparse_utils.py: "--master_addr" is "--master-addr"), "=value" is cut off, and
	// -O3, -O=3 and -O 3 are "--optimization-level".
	Flag string
	// Base is Flag without a JSON argument's ".key" path ("--compilation-config.mode" is
	// "--compilation-config").
	Base string
}

// ExtraArgOptions are the options in args, in vLLM's spelling. A token that does not
// start with "-", and a negative number, is a value (or a positional), not an option.
func ExtraArgOptions(args []string) []Arg {
	var out []Arg
	for i, a := range args {
		flag, ok := normalizeFlag(a)
		if !ok {
			continue
		}
		base, _, _ := strings.Cut(flag, ".")
		out = append(out, Arg{Index: i, Flag: flag, Base: base})
	}
	return out
}

// normalizeFlag is vLLM's spelling of one token, when it is an option.
func normalizeFlag(a string) (string, bool) {
	switch {
	case a == "-" || !strings.HasPrefix(a, "-"):
		return "", false
	case len(a) > 1 && (unicode.IsDigit(rune(a[1])) || a[1] == '.'):
		return "", false // a negative number
	case strings.HasPrefix(a, "--"):
		key, _, _ := strings.Cut(a, "=")
		name, path, dotted := strings.Cut(key[2:], ".")
		key = "--" + strings.ReplaceAll(name, "_", "-")
		if dotted {
			key += "." + path
		}
		return key, true
	case strings.HasPrefix(a, "-O"):
		return "--optimization-level", true
	}
	key, _, _ := strings.Cut(a, "=")
	return key, true
}

// abbreviates says flag is an abbreviation argparse would read as long (allow_abbrev is
// argparse's default, and vLLM's parser keeps it): "--master-a" is "--master-addr".
func abbreviates(flag, long string) bool {
	return strings.HasPrefix(long, "--") && len(flag) > 2 && len(flag) < len(long) && strings.HasPrefix(long, flag)
}
