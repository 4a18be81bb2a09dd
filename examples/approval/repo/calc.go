// Package calc adds numbers.
package calc

// Add returns a plus b.
func Add(a, b int) int { return a - b }
