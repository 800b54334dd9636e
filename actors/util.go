package actors

import "fmt"

func typeName(v any) string { return fmt.Sprintf("%T", v) }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
