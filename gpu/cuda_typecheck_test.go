//go:build !cuda

package gpu

import (
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCUDABuildTypechecks typechecks this package as -tags cuda builds it,
// tests included, on machines without CUDA headers (where go vet -tags
// cuda cannot run cgo): references to C are faked (go/types FakeImportC),
// here and in gorgonia.org/cu, whose Go API is what the backend must fit.
// It catches a CUDA backend that no longer implements Device or Arena, or
// calls cu with the wrong types.
func TestCUDABuildTypechecks(t *testing.T) {
	if testing.Short() {
		t.Skip("typechecks the standard library from source; slow")
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "gorgonia.org/cu").Output()
	cuDir := strings.TrimSpace(string(out))
	if err != nil || cuDir == "" {
		t.Skipf("gorgonia.org/cu source not available: %v", err)
	}
	fset := token.NewFileSet()
	imp := &fakeCgoImporter{fset: fset, def: importer.ForCompiler(fset, "source", nil), cuDir: cuDir}
	var errs []string
	conf := types.Config{FakeImportC: true, Importer: imp, Error: func(err error) { errs = append(errs, err.Error()) }}
	files, err := parseBuild(fset, ".", []string{"cuda"}, true)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = conf.Check("github.com/kvtier/kvtier/gpu", fset, files, nil)
	if imp.err != nil {
		t.Fatal(imp.err)
	}
	for _, e := range errs {
		t.Error(e)
	}
}

type fakeCgoImporter struct {
	fset  *token.FileSet
	def   types.Importer
	cuDir string
	cu    *types.Package
	err   error
}

func (m *fakeCgoImporter) Import(path string) (*types.Package, error) {
	if path != "gorgonia.org/cu" {
		return m.def.Import(path)
	}
	if m.cu == nil {
		files, err := parseBuild(m.fset, m.cuDir, nil, false)
		if err != nil {
			m.err = err
			return nil, err
		}
		// Its own errors are the faked C types'; only its Go API matters.
		conf := types.Config{FakeImportC: true, Importer: m, Error: func(error) {}}
		m.cu, _ = conf.Check(path, m.fset, files, nil)
	}
	return m.cu, nil
}

// parseBuild parses the files of the package in dir that a cgo build with
// tags would compile, with its in-package tests if tests is set.
func parseBuild(fset *token.FileSet, dir string, tags []string, tests bool) ([]*ast.File, error) {
	ctx := build.Default
	ctx.BuildTags = tags
	ctx.CgoEnabled = true
	pkg, err := ctx.ImportDir(dir, 0)
	if err != nil {
		return nil, err
	}
	names := append(append([]string{}, pkg.GoFiles...), pkg.CgoFiles...)
	if tests {
		names = append(names, pkg.TestGoFiles...)
	}
	var files []*ast.File
	for _, n := range names {
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}
