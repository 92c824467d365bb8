package mesh

import (
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// Envoy compiles a route's regexes with RE2 and refuses one whose RE2 program is larger than
// its runtime key re2.max_program_size.error_level, 100 by default: the listener holding it
// is refused, and the outbound keeps its last configuration. 100 refuses regexes routes
// commonly hold (^/users/[a-z0-9-]{1,64}$ is 259), so the agent's bootstrap lifts Envoy's
// limit (bootstrap.Build, as Kuma's does) and the bound is kept here instead, at
// maxRE2ProgramSize, where a regex over it is refused naming its field rather than taking
// an update of Envoy's resources down with it. Go's regexp reads RE2's syntax
// but compiles to another program, so re2ProgramSize estimates RE2's size from Go's as RE2
// builds it: adjacent repetitions of one character merged (x{0,20}x+ is x+), a character as
// its UTF-8 bytes (a class beyond ASCII as a byte automaton), anchors and the literal prefix
// of an anchored regex outside the program, alternations flattened. The estimate leaves out
// what the flattening adds back, so it is at most RE2's size plus a few instructions and
// mostly under it: a regex refused for its size is over the bound in RE2 too, while some
// over it still pass - Envoy, its limit lifted, takes them. TestRE2ProgramSizeEstimate
// holds RE2's own sizes for a table of regexes.

// maxRE2ProgramSize bounds a route regex's RE2 program (Istio's error level for Envoy):
// RE2 runs in linear time, and this keeps each regex's memory in Envoy bounded too.
const maxRE2ProgramSize = 32768

// re2ProgramSize is the estimated size of RE2's program for re (which Go's regexp/syntax
// parses).
func re2ProgramSize(re string) (int, error) {
	parsed, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return 0, err
	}
	simple := coalesce(parsed).Simplify()
	prog, err := syntax.Compile(simple)
	if err != nil {
		return 0, err
	}
	// RE2's fail, match and the unanchored search's loop, then Go's instructions but its
	// alternations and empty-width assertions (RE2 flattens the former and keeps the
	// anchors out of its program), a character as its UTF-8 bytes.
	n := 4
	for i := range prog.Inst {
		in := &prog.Inst[i]
		switch in.Op {
		case syntax.InstRune1:
			n += utf8.RuneLen(in.Rune[0])
		case syntax.InstRune:
			n += classSize(in)
		case syntax.InstRuneAny:
			n += 1 + nonASCIIAll // ASCII in one range, then the rest
		case syntax.InstRuneAnyNotNL:
			n += 2 + nonASCIIAll // ASCII but \n in two ranges, then the rest
		case syntax.InstCapture:
			n++
		}
	}
	n -= anchoredPrefix(simple)
	return max(n, 1), nil
}

// nonASCIIAll is what RE2 compiles every character from U+0080 on to (its own short form).
const nonASCIIAll = 6

// classSize is the number of RE2 instructions of one of Go's rune instructions: a literal
// (folded: each of its cases) or a class.
func classSize(in *syntax.Inst) int {
	runes := in.Rune
	if len(runes) == 1 { // a literal folded to its cases: RE2 folds ASCII in one instruction
		n, ascii := 0, false
		r0 := runes[0]
		for r := r0; ; {
			if r < utf8.RuneSelf {
				ascii = true
			} else {
				n += utf8.RuneLen(r)
			}
			if r = unicode.SimpleFold(r); r == r0 {
				break
			}
		}
		if ascii {
			n++
		}
		return n
	}
	n := 0
	var nonASCII [][2]rune
	for i := 0; i+1 < len(runes); i += 2 {
		lo, hi := runes[i], runes[i+1]
		if lo < utf8.RuneSelf {
			n++
			if hi < utf8.RuneSelf {
				continue
			}
			lo = utf8.RuneSelf
		}
		nonASCII = append(nonASCII, [2]rune{lo, hi})
	}
	if len(nonASCII) == 1 && nonASCII[0] == [2]rune{utf8.RuneSelf, unicode.MaxRune} {
		return n + nonASCIIAll
	}
	return n + utf8Automaton(nonASCII)
}

// utf8Automaton counts the instructions of RE2's automaton for rune ranges of two bytes or
// more: each range is split into sequences of byte ranges of one length; sequences starting
// alike share their start (a trie), and equal remainders are one.
func utf8Automaton(ranges [][2]rune) int {
	type trie struct {
		lo, hi byte
		kids   []*trie
	}
	root := &trie{}
	add := func(seq [][2]byte) {
		t := root
		for _, b := range seq {
			var next *trie
			if k := len(t.kids); k > 0 && t.kids[k-1].lo == b[0] && t.kids[k-1].hi == b[1] {
				next = t.kids[k-1]
			} else {
				next = &trie{lo: b[0], hi: b[1]}
				t.kids = append(t.kids, next)
			}
			t = next
		}
	}
	var split func(lo, hi rune)
	split = func(lo, hi rune) {
		// Split at the UTF-8 length boundaries, then until every byte but the first spans
		// 80-BF or lo and hi differ in their last byte only.
		for _, b := range []rune{0x7FF, 0xFFFF} {
			if lo <= b && b < hi {
				split(lo, b)
				split(b+1, hi)
				return
			}
		}
		var a, z [utf8.UTFMax]byte
		na := utf8.EncodeRune(a[:], lo)
		utf8.EncodeRune(z[:], hi)
		for i := na - 1; i > 0; i-- {
			m := rune(1)<<(6*uint(na-i)) - 1
			if lo&^m != hi&^m {
				if lo&m != 0 {
					split(lo, lo|m)
					split((lo|m)+1, hi)
					return
				}
				if hi&m != m {
					split(lo, (hi&^m)-1)
					split(hi&^m, hi)
					return
				}
			}
		}
		seq := make([][2]byte, na)
		for i := range seq {
			seq[i] = [2]byte{a[i], z[i]}
		}
		add(seq)
	}
	for _, r := range ranges {
		split(r[0], r[1])
	}
	// Equal subtrees are one instruction each.
	ids := map[string]int{}
	var walk func(t *trie) int
	walk = func(t *trie) int {
		key := []byte{t.lo, t.hi}
		for _, k := range t.kids {
			key = utf8.AppendRune(key, rune(walk(k)))
		}
		if v, ok := ids[string(key)]; ok {
			return v
		}
		ids[string(key)] = len(ids) + 1
		return ids[string(key)]
	}
	for _, k := range root.kids {
		walk(k)
	}
	return len(ids)
}

// anchoredPrefix is the length in bytes of the literal an anchored regex starts with, which
// RE2 matches outside its program.
func anchoredPrefix(re *syntax.Regexp) int {
	if re.Op != syntax.OpConcat || len(re.Sub) < 2 || re.Sub[0].Op != syntax.OpBeginText {
		return 0
	}
	lit := re.Sub[1]
	if lit.Op != syntax.OpLiteral || lit.Flags&syntax.FoldCase != 0 {
		return 0
	}
	n := 0
	for _, r := range lit.Rune {
		n += utf8.RuneLen(r)
	}
	return n
}

// coalesce merges, as RE2 does before compiling, a repetition of a character (or class) and
// the same character or repetition after it: x*x{2} is x{2,}, x{0,20}x+ is x+.
func coalesce(re *syntax.Regexp) *syntax.Regexp {
	for i, sub := range re.Sub {
		re.Sub[i] = coalesce(sub)
	}
	if re.Op != syntax.OpConcat {
		return re
	}
	out := re.Sub[:0:0]
	for _, sub := range re.Sub {
		if k := len(out); k > 0 {
			if merged := coalescePair(out[k-1], sub); merged != nil {
				out[k-1] = merged
				continue
			}
		}
		out = append(out, sub)
	}
	re.Sub = out
	return re
}

// repetition is re as x{min,max} (max -1: unbounded) when re repeats one character or class;
// ok false otherwise.
func repetition(re *syntax.Regexp) (x *syntax.Regexp, lo, hi int, greedy, ok bool) {
	greedy = re.Flags&syntax.NonGreedy == 0
	switch re.Op {
	case syntax.OpStar:
		x, lo, hi = re.Sub[0], 0, -1
	case syntax.OpPlus:
		x, lo, hi = re.Sub[0], 1, -1
	case syntax.OpQuest:
		x, lo, hi = re.Sub[0], 0, 1
	case syntax.OpRepeat:
		x, lo, hi = re.Sub[0], re.Min, re.Max
	default:
		return nil, 0, 0, false, false
	}
	switch x.Op {
	case syntax.OpLiteral:
		ok = len(x.Rune) == 1
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		ok = true
	}
	return x, lo, hi, greedy, ok
}

func coalescePair(a, b *syntax.Regexp) *syntax.Regexp {
	x, lo, hi, greedy, ok := repetition(a)
	if !ok {
		return nil
	}
	y, lo2, hi2, greedy2, ok2 := repetition(b)
	if !ok2 {
		y, lo2, hi2, greedy2 = b, 1, 1, greedy
	}
	if greedy != greedy2 || !x.Equal(y) {
		return nil
	}
	lo += lo2
	if hi < 0 || hi2 < 0 {
		hi = -1
	} else {
		hi += hi2
	}
	if lo > 1000 || hi > 1000 {
		return nil
	}
	flags := a.Flags
	return &syntax.Regexp{Op: syntax.OpRepeat, Flags: flags, Sub: []*syntax.Regexp{x}, Min: lo, Max: hi}
}
