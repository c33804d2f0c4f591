package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestArchitecturePackageTable keeps ARCHITECTURE.md true: its package
// table lists exactly the packages `go list ./...` prints, each with the
// project packages it really imports.
func TestArchitecturePackageTable(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	table := packageTable(string(doc))
	got := goListImports(t, root)
	for pkg, imports := range got {
		row, ok := table[pkg]
		if !ok {
			t.Errorf("ARCHITECTURE.md has no row for package %s", pkg)
			continue
		}
		if !slices.Equal(row, imports) {
			t.Errorf("ARCHITECTURE.md: %s imports %v, the table says %v", pkg, imports, row)
		}
	}
	for pkg := range table {
		if _, ok := got[pkg]; !ok {
			t.Errorf("ARCHITECTURE.md names package %s, which does not exist", pkg)
		}
	}
}

// packageTable reads the rows "| `dir/` | role | `a`, `b` |" of the
// table under "## Packages": package dir → sorted project imports.
func packageTable(doc string) map[string][]string {
	_, section, _ := strings.Cut(doc, "## Packages")
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([^`]+)/` \\|.*\\| ([^|]*) \\|$")
	name := regexp.MustCompile("`([^`]+)`")
	out := map[string][]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		imports := []string{}
		for _, n := range name.FindAllStringSubmatch(m[2], -1) {
			imports = append(imports, n[1])
		}
		slices.Sort(imports)
		out[m[1]] = imports
	}
	return out
}

// goListImports returns each package of the module (as a directory
// relative to the root) with the module's packages it imports outside
// tests.
func goListImports(t *testing.T, root string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/shaperproxy/shaperproxy/"
	pkgs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		imports := []string{}
		for _, imp := range f[1:] {
			if rel, ok := strings.CutPrefix(imp, module); ok {
				imports = append(imports, rel)
			}
		}
		slices.Sort(imports)
		pkgs[strings.TrimPrefix(f[0], module)] = imports
	}
	return pkgs
}
