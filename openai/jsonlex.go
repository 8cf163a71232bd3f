package openai

import (
	"encoding/binary"
	"math/bits"
)

// SWAR constants: every byte 0x01, 0x80, and the bytes a string stops at.
const (
	swarOnes  = 0x0101010101010101
	swarHighs = 0x8080808080808080
	swarQuote = '"' * swarOnes
	swarSlash = '\\' * swarOnes
	swarSpace = ' ' * swarOnes
)

// special8 flags, in the high bit of each byte of v, the bytes a string
// stops at: a quote, a backslash, a byte below 0x20. The lowest flagged
// byte is exact (higher ones may be false positives: a borrow).
func special8(v uint64) uint64 {
	q, s := v^swarQuote, v^swarSlash
	return (((q - swarOnes) &^ q) | ((s - swarOnes) &^ s) | ((v - swarSpace) &^ v)) & swarHighs
}

// simpleEscape marks the letters of the two-byte escapes (\" \\ \/ \b \f
// \n \r \t).
var simpleEscape = [256]bool{'"': true, '\\': true, '/': true, 'b': true, 'f': true, 'n': true, 'r': true, 't': true}

// gather moves the high bit of each byte of m (special8's flags) to one
// bit per byte (bit k for byte k) in one multiplication: the partial
// products land on distinct bits, so nothing carries.
func gather(m uint64) uint64 { return m * 0x0002040810204081 >> 56 }

// scanString skips the string that starts at data[i] ('"') and returns
// the index after its closing quote. It flags the quotes, backslashes and
// control bytes of 64 bytes at once (a window without any is passed in
// one step) and steps from one flag to the next within the window: a
// two-byte escape costs no new window. A flag past the first of its word
// may be false (a borrow): its byte is looked at before it counts.
// Anything else than a two-byte escape or the closing quote (a control
// byte, a \u or bad escape, the last 63 bytes) is read a byte at a time,
// eight at once between stops, with encoding/json's errors. Other bytes
// (invalid UTF-8 included, as encoding/json's scanner) pass.
func scanString(data []byte, i int) (int, *syntaxError) {
	j := i + 1
	for {
	window:
		for j+64 <= len(data) {
			b := data[j : j+64 : j+64]
			m0 := special8(binary.LittleEndian.Uint64(b[0:8]))
			m1 := special8(binary.LittleEndian.Uint64(b[8:16]))
			m2 := special8(binary.LittleEndian.Uint64(b[16:24]))
			m3 := special8(binary.LittleEndian.Uint64(b[24:32]))
			m4 := special8(binary.LittleEndian.Uint64(b[32:40]))
			m5 := special8(binary.LittleEndian.Uint64(b[40:48]))
			m6 := special8(binary.LittleEndian.Uint64(b[48:56]))
			m7 := special8(binary.LittleEndian.Uint64(b[56:64]))
			if m0|m1|m2|m3|m4|m5|m6|m7 == 0 {
				j += 64
				continue
			}
			stops := gather(m0) | gather(m1)<<8 | gather(m2)<<16 | gather(m3)<<24 |
				gather(m4)<<32 | gather(m5)<<40 | gather(m6)<<48 | gather(m7)<<56
			for stops != 0 {
				k := bits.TrailingZeros64(stops)
				switch b[k] {
				case '"':
					return j + k + 1, nil
				case '\\':
					if k+1 < len(b) && simpleEscape[b[k+1]] {
						stops &= ^uint64(0) << (k + 2) // past the escaped byte
						continue
					}
					if k+1 == len(b) && j+k+1 < len(data) && simpleEscape[data[j+k+1]] {
						j += k + 2 // the escaped byte starts the next window
						continue window
					}
				default:
					if b[k] >= 0x20 { // a false flag
						stops &= stops - 1
						continue
					}
				}
				j += k // a control byte or another escape
				break window
			}
			j += 64
		}
		for j+8 <= len(data) {
			if m := special8(binary.LittleEndian.Uint64(data[j : j+8])); m != 0 {
				j += bits.TrailingZeros64(m) / 8
				break
			}
			j += 8
		}
		if j == len(data) {
			return j, errUnexpectedEnd(data)
		}
		switch c := data[j]; {
		case c == '"':
			return j + 1, nil
		case c == '\\':
			j++
			if j == len(data) {
				return j, errEnd(data, "in string escape code")
			}
			switch data[j] {
			case 'b', 'f', 'n', 'r', 't', '\\', '/', '"':
				j++
			case 'u':
				j++
				for range 4 {
					if j == len(data) {
						return j, errEnd(data, `in \u hexadecimal character escape`)
					}
					if !isHex(data[j]) {
						return j, errAt(data[j], j, `in \u hexadecimal character escape`)
					}
					j++
				}
			default:
				return j, errAt(data[j], j, "in string escape code")
			}
		case c < 0x20:
			return j, errAt(c, j, "in string literal")
		default: // fewer than 8 bytes left
			j++
		}
	}
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// skipDigits returns the index of the first non-digit from i.
func skipDigits(data []byte, i int) int {
	for i < len(data) && isDigit(data[i]) {
		i++
	}
	return i
}

// scanNumber skips the number that starts at data[i] ('-' or a digit)
// and returns the index after it; what follows is checked by the caller.
func scanNumber(data []byte, i int) (int, *syntaxError) {
	if data[i] == '-' {
		i++
		if i == len(data) {
			return i, errEnd(data, "in numeric literal")
		}
		if !isDigit(data[i]) {
			return i, errAt(data[i], i, "in numeric literal")
		}
	}
	if data[i] == '0' {
		i++
	} else {
		i = skipDigits(data, i+1)
	}
	if i < len(data) && data[i] == '.' {
		i++
		if i == len(data) {
			return i, errEnd(data, "after decimal point in numeric literal")
		}
		if !isDigit(data[i]) {
			return i, errAt(data[i], i, "after decimal point in numeric literal")
		}
		i = skipDigits(data, i+1)
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i == len(data) {
			return i, errEnd(data, "in exponent of numeric literal")
		}
		if !isDigit(data[i]) {
			return i, errAt(data[i], i, "in exponent of numeric literal")
		}
		i = skipDigits(data, i+1)
	}
	return i, nil
}

// scanLiteral skips lit (true, false or null), whose first byte is at
// data[i].
func scanLiteral(data []byte, i int, lit string) (int, *syntaxError) {
	for k := 1; k < len(lit); k++ {
		if i+k == len(data) {
			return i + k, errEnd(data, literalContext(lit, k))
		}
		if data[i+k] != lit[k] {
			return i + k, errAt(data[i+k], i+k, literalContext(lit, k))
		}
	}
	return i + len(lit), nil
}

func literalContext(lit string, k int) string {
	return "in literal " + lit + " (expecting " + quoteChar(lit[k]) + ")"
}
