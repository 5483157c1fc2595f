package packaging

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// need finds a program the test drives; with CI=true a missing one fails the test.
func need(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not installed: run make deps", name)
			}
			t.Skipf("%s not installed: run make deps", name)
		}
	}
}

func output(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("%s %s: %v %s", name, strings.Join(args, " "), err, msg)
	}
	return string(out)
}

var versionOnce = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("./version.sh").Output()
	return strings.TrimSpace(string(out)), err
})

// deb is the package `make package` built for arch from this very tree (the version names the
// commit and whether the tree was dirty, so a stale package is not taken for it). scripts/test.sh
// runs make package before the tests; elsewhere a missing package skips, or fails with CI=true.
func deb(t *testing.T, arch string) string {
	t.Helper()
	version, err := versionOnce()
	if err != nil {
		t.Fatalf("version.sh: %v", err)
	}
	path := filepath.Join("..", "dist", "omnisat_"+version+"-1_"+arch+".deb")
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s missing: scripts/test.sh runs make package first", path)
		}
		t.Skipf("%s missing: run make package", path)
	}
	return path
}

// extract unpacks the package's files (dpkg -x) and its control part (dpkg-deb -e).
func extract(t *testing.T, debPath string) (root, control string) {
	t.Helper()
	need(t, "dpkg-deb")
	root, control = t.TempDir(), t.TempDir()
	output(t, "dpkg-deb", "-x", debPath, root)
	output(t, "dpkg-deb", "-e", debPath, control)
	return root, control
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dependsAlternatives is the Depends field as a list of "a (>= 1) | b" alternatives.
func dependsAlternatives(field string) [][]string {
	var deps [][]string
	for _, d := range strings.Split(field, ",") {
		var alts []string
		for _, a := range strings.Split(d, "|") {
			alts = append(alts, strings.TrimSpace(a))
		}
		deps = append(deps, alts)
	}
	return deps
}

func packageName(dep string) string { return strings.Fields(dep)[0] }

func TestAmd64PackageFiles(t *testing.T) {
	need(t, "dpkg-deb")
	path := deb(t, "amd64")
	root, control := extract(t, path)
	version, _ := versionOnce()

	for field, want := range map[string]string{"Package": "omnisat", "Version": version + "-1", "Architecture": "amd64"} {
		if got := strings.TrimSpace(output(t, "dpkg-deb", "-f", path, field)); got != want {
			t.Errorf("%s: %q; want %q", field, got, want)
		}
	}

	for _, f := range []struct {
		path string
		mode fs.FileMode
	}{
		{"usr/bin/omnisat", 0o755},
		{"usr/bin/omnisat-ctl", 0o755},
		{"usr/libexec/omnisat/omnisat-camera", 0o755},
		{"usr/libexec/omnisat/omnisat-simulator", 0o755},
		{"lib/systemd/system/omnisat.service", 0o644},
		{"etc/omnisat/omnisat.yaml", 0o644}, // root:omnisat 0640 comes from postinst's statoverride
		{"usr/share/doc/omnisat/copyright", 0o644},
		{"usr/share/doc/omnisat/changelog.Debian.gz", 0o644},
		{"usr/share/man/man1/omnisat.1.gz", 0o644},
		{"usr/share/man/man1/omnisat-ctl.1.gz", 0o644},
		{"usr/share/lintian/overrides/omnisat", 0o644},
	} {
		st, err := os.Lstat(filepath.Join(root, f.path))
		if err != nil {
			t.Errorf("%s: %v", f.path, err)
			continue
		}
		if !st.Mode().IsRegular() || st.Mode().Perm() != f.mode {
			t.Errorf("%s: mode %v; want a file with %v", f.path, st.Mode(), f.mode)
		}
	}
	if st, err := os.Stat(filepath.Join(root, "var/lib/omnisat")); err != nil || !st.IsDir() {
		t.Errorf("var/lib/omnisat: %v", err)
	}
	if got, want := readFile(t, filepath.Join(root, "lib/systemd/system/omnisat.service")), readFile(t, "omnisat.service"); got != want {
		t.Error("the packaged unit is not packaging/omnisat.service")
	}
	if got, want := readFile(t, filepath.Join(root, "etc/omnisat/omnisat.yaml")), readFile(t, "../configs/omnisat.example.yaml"); got != want {
		t.Error("/etc/omnisat/omnisat.yaml is not configs/omnisat.example.yaml")
	}
	if got := readFile(t, filepath.Join(control, "conffiles")); got != "/etc/omnisat/omnisat.yaml\n" {
		t.Errorf("conffiles %q; want only /etc/omnisat/omnisat.yaml", got)
	}

	// The changelog is a Debian changelog of this version (dpkg-parsechangelog reads it back).
	gz, err := os.Open(filepath.Join(root, "usr/share/doc/omnisat/changelog.Debian.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer gz.Close()
	zr, err := gzip.NewReader(gz)
	if err != nil {
		t.Fatal(err)
	}
	changelog, _ := io.ReadAll(zr)
	cl := filepath.Join(t.TempDir(), "changelog")
	os.WriteFile(cl, changelog, 0o644)
	need(t, "dpkg-parsechangelog")
	if got := strings.TrimSpace(output(t, "dpkg-parsechangelog", "-l", cl, "-S", "Version")); got != version+"-1" {
		t.Errorf("changelog version %q; want %q", got, version+"-1")
	}

	// The installed binary runs, says its package version and renders the unit it ships.
	bin := filepath.Join(root, "usr/bin/omnisat")
	if got := output(t, bin, "version"); got != "omnisat "+version+"\n" {
		t.Errorf("omnisat version: %q", got)
	}
	if got := output(t, bin, "service", "unit", "--exec", "/usr/bin/omnisat", "-c", "/etc/omnisat/omnisat.yaml"); got != readFile(t, "omnisat.service") {
		t.Error("the packaged binary renders a unit other than the one packaged")
	}
	if out, err := exec.Command(filepath.Join(root, "usr/bin/omnisat-ctl"), "--socket", filepath.Join(t.TempDir(), "none.sock"), "status").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "no control socket") {
		t.Errorf("omnisat-ctl without an agent: %v %q", err, out)
	}
}

// Depends names every library the binaries link (what dpkg-shlibdeps finds, with its version),
// the echo canceller's libspeexdsp1 and adduser (postinst).
func TestAmd64PackageDepends(t *testing.T) {
	need(t, "dpkg-deb", "dpkg-shlibdeps")
	path := deb(t, "amd64")
	root, _ := extract(t, path)
	depends := dependsAlternatives(output(t, "dpkg-deb", "-f", path, "Depends"))
	has := func(dep string) bool {
		for _, alts := range depends {
			if slices.Contains(alts, dep) {
				return true
			}
		}
		return false
	}

	// dpkg-shlibdeps wants a debian/control beside it.
	work := t.TempDir()
	os.MkdirAll(filepath.Join(work, "debian"), 0o755)
	os.WriteFile(filepath.Join(work, "debian/control"), []byte("Source: omnisat\n\nPackage: omnisat\nArchitecture: any\n"), 0o644)
	cmd := exec.Command("dpkg-shlibdeps", "-O", filepath.Join(root, "usr/bin/omnisat"), filepath.Join(root, "usr/libexec/omnisat/omnisat-camera"))
	cmd.Dir = work
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dpkg-shlibdeps: %v", err)
	}
	shlibs, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "shlibs:Depends=")
	if !ok {
		t.Fatalf("dpkg-shlibdeps said %q", out)
	}
	needs := dependsAlternatives(shlibs)
	if len(needs) < 5 {
		t.Fatalf("dpkg-shlibdeps found only %q", shlibs)
	}
	for _, alts := range needs {
		if !has(alts[0]) {
			t.Errorf("the binaries need %s; Depends lacks it (packaging/nfpm.yaml)", alts[0])
		}
	}
	for _, dep := range []string{"libspeexdsp1 (>= 1.2.1)", "adduser"} {
		if !has(dep) {
			t.Errorf("Depends lacks %s", dep)
		}
	}
	// And no library the binaries do not link: an extra one is installed on every satellite for
	// nothing (libportaudio2 was, once PortAudio was linked in).
	linked := map[string]bool{}
	for _, alts := range needs {
		linked[packageName(alts[0])] = true
	}
	for _, alts := range depends {
		if dep := packageName(alts[0]); strings.HasPrefix(dep, "lib") && !linked[dep] {
			t.Errorf("Depends lists %s, which no binary links (packaging/nfpm.yaml)", alts[0])
		}
	}
}

// needed lists the shared libraries an ELF binary links (readelf -d), sorted.
func needed(t *testing.T, bin string) []string {
	t.Helper()
	var libs []string
	for _, m := range regexp.MustCompile(`\(NEEDED\)\s+Shared library: \[([^\]]+)\]`).FindAllStringSubmatch(output(t, "readelf", "-d", bin), -1) {
		libs = append(libs, m[1])
	}
	slices.Sort(libs)
	return libs
}

// Only the camera program links OpenCV: omnisat itself (an audio-only satellite) loads none of
// its libraries.
func TestOpenCVOnlyInTheCameraProgram(t *testing.T) {
	need(t, "dpkg-deb", "readelf")
	for _, arch := range []string{"amd64", "arm64"} {
		root, _ := extract(t, deb(t, arch))
		count := func(bin string) int {
			n := 0
			for _, lib := range needed(t, filepath.Join(root, bin)) {
				if strings.HasPrefix(lib, "libopencv") {
					n++
				}
			}
			return n
		}
		if n := count("usr/bin/omnisat"); n != 0 {
			t.Errorf("%s: usr/bin/omnisat links %d OpenCV libraries", arch, n)
		}
		if n := count("usr/libexec/omnisat/omnisat-camera"); n < 5 {
			t.Errorf("%s: the camera program links %d OpenCV libraries", arch, n)
		}
	}
}

func TestMaintainerScripts(t *testing.T) {
	need(t, "dpkg-deb", "sh")
	_, control := extract(t, deb(t, "amd64"))
	scripts := map[string]string{}
	for _, name := range []string{"postinst", "prerm", "postrm"} {
		path := filepath.Join(control, name)
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm()&0o111 == 0 {
			t.Fatalf("%s: %v (mode %v)", name, err, st)
		}
		if out, err := exec.Command("sh", "-n", path).CombinedOutput(); err != nil {
			t.Errorf("%s: sh -n: %v %s", name, err, out)
		}
		scripts[name] = readFile(t, path)
	}
	contains := func(script string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(scripts[script], w) {
				t.Errorf("%s lacks %q", script, w)
			}
		}
	}
	contains("postinst", "adduser --system --group", `for group in audio video`, `adduser --quiet omnisat "$group"`,
		"deb-systemd-helper enable omnisat.service", "dpkg-statoverride --update --add root omnisat 0640 /etc/omnisat/omnisat.yaml",
		"dpkg-statoverride --update --add omnisat omnisat 0750 /var/lib/omnisat")
	// Enabled, never started by installation (only an upgrade restarts a running service).
	if regexp.MustCompile(`(systemctl|deb-systemd-invoke)[^\n]*\bstart\b`).MatchString(scripts["postinst"]) {
		t.Error("postinst starts the service")
	}
	contains("prerm", "deb-systemd-invoke stop omnisat.service")
	contains("postrm", `"$1" = "purge"`, "deb-systemd-helper purge omnisat.service", "rm -rf /var/lib/omnisat",
		"dpkg-statoverride --remove")
}

// The arm64 package holds an arm64 binary that links the same libraries as the amd64 one (so
// the shared Depends fit it), and that binary runs under qemu-user with the sysroot's libraries.
func TestArm64Package(t *testing.T) {
	need(t, "dpkg-deb", "readelf", "qemu-aarch64-static")
	path := deb(t, "arm64")
	if got := strings.TrimSpace(output(t, "dpkg-deb", "-f", path, "Architecture")); got != "arm64" {
		t.Fatalf("Architecture %q", got)
	}
	root, _ := extract(t, path)
	amd64Root, _ := extract(t, deb(t, "amd64"))
	bin := filepath.Join(root, "usr/bin/omnisat")

	// The libraries besides libc6's own (its loader and libm differ between the two builds).
	libc6 := regexp.MustCompile(`^(ld-linux.*|libc|libm|libpthread|libdl)\.so`)
	beyondLibc := func(bin string) []string {
		return slices.DeleteFunc(needed(t, bin), libc6.MatchString)
	}
	for _, prog := range []string{"usr/bin/omnisat", "usr/libexec/omnisat/omnisat-camera"} {
		if h := output(t, "readelf", "-h", filepath.Join(root, prog)); !strings.Contains(h, "AArch64") {
			t.Fatalf("%s is not an arm64 binary:\n%s", prog, h)
		}
		if a, b := beyondLibc(filepath.Join(root, prog)), beyondLibc(filepath.Join(amd64Root, prog)); !slices.Equal(a, b) {
			t.Errorf("%s: arm64 links %v, amd64 %v: one Depends list cannot serve both", prog, a, b)
		}
	}
	if got, want := readFile(t, filepath.Join(root, "lib/systemd/system/omnisat.service")), readFile(t, "omnisat.service"); got != want {
		t.Error("the arm64 package's unit is not packaging/omnisat.service")
	}

	sysroot := os.Getenv("SYSROOT_ARM64") // where package.sh put it
	if sysroot == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		sysroot = filepath.Join(cache, "omnisat", "sysroot-arm64-bookworm")
	}
	if _, err := os.Stat(filepath.Join(sysroot, "usr/lib/aarch64-linux-gnu")); err != nil {
		t.Fatalf("no arm64 sysroot at %s (make package makes it): %v", sysroot, err)
	}
	cmd := exec.Command("qemu-aarch64-static", bin, "version")
	cmd.Env = append(os.Environ(), "QEMU_LD_PREFIX="+sysroot)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	version, _ := versionOnce()
	if err := cmd.Run(); err != nil || out.String() != "omnisat "+version+"\n" {
		t.Fatalf("arm64 omnisat version under qemu: %v %q", err, out.String())
	}
}

// version.sh turns git's description into a Debian version that sorts the way releases do.
func TestVersionScript(t *testing.T) {
	need(t, "git", "dpkg")
	repo := t.TempDir()
	script, _ := filepath.Abs("version.sh")
	os.MkdirAll(filepath.Join(repo, "packaging"), 0o755)
	copyScript := readFile(t, script)
	os.WriteFile(filepath.Join(repo, "packaging/version.sh"), []byte(copyScript), 0o755)
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"}, args...)...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z", "GIT_AUTHOR_DATE=2026-01-02T03:04:05Z")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	version := func() string {
		t.Helper()
		out, err := exec.Command(filepath.Join(repo, "packaging/version.sh")).Output()
		if err != nil {
			t.Fatalf("version.sh: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	commit := func(file string) {
		t.Helper()
		os.WriteFile(filepath.Join(repo, file), []byte(file), 0o644)
		git("add", ".")
		git("commit", "-q", "-m", file)
	}
	git("init", "-q")
	commit("a")
	var seen []string
	check := func(pattern string) {
		t.Helper()
		v := version()
		if !regexp.MustCompile(`^` + pattern + `$`).MatchString(v) {
			t.Fatalf("version %q does not match %s", v, pattern)
		}
		seen = append(seen, v)
	}
	check(`0\.0\.0~git20260102\.[0-9a-f]{7}`)
	git("tag", "v1.2.3")
	check(`1\.2\.3`)
	commit("b")
	check(`1\.2\.3\+git20260102\.1\.[0-9a-f]{7}`)
	git("tag", "v2.0.0-rc1")
	check(`2\.0\.0~rc1`)
	commit("c")
	git("tag", "v2.0.0")
	check(`2\.0\.0`)
	os.WriteFile(filepath.Join(repo, "c"), []byte("changed"), 0o644)
	check(`2\.0\.0\+dirty`)
	for i := 1; i < len(seen); i++ {
		if err := exec.Command("dpkg", "--compare-versions", seen[i-1], "lt", seen[i]).Run(); err != nil {
			t.Errorf("dpkg does not sort %s before %s", seen[i-1], seen[i])
		}
	}
}

// The amd64 package installed for real, with dpkg inside a chroot of a minimal bookworm system
// that holds only what Depends names: the maintainer scripts run (user, groups, modes, the
// unit enabled), the binary runs on the libraries Depends brought, an edited conffile survives
// a reinstall, and remove and purge clean up. Needs root (chroot) and mmdebstrap; the base
// system is kept in the user's cache (about 800 MB, a minute to make).
func TestInstallIntoScratchSystem(t *testing.T) {
	need(t, "dpkg-deb", "mmdebstrap", "chroot")
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("installing into a chroot needs root")
		}
		t.Skip("installing into a chroot needs root")
	}
	path := deb(t, "amd64")
	var runtime []string
	for _, alts := range dependsAlternatives(output(t, "dpkg-deb", "-f", path, "Depends")) {
		runtime = append(runtime, packageName(alts[0]))
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(cache, "omnisat", "install-root-amd64-bookworm")
	if out, err := exec.Command("./install-root.sh", base, strings.Join(runtime, ",")).CombinedOutput(); err != nil {
		t.Fatalf("install-root.sh: %v\n%s", err, out)
	}
	root := filepath.Join(t.TempDir(), "root")
	if out, err := exec.Command("cp", "-a", base, root).CombinedOutput(); err != nil {
		t.Fatalf("copy the base system: %v %s", err, out)
	}
	debBytes, _ := os.ReadFile(path)
	os.WriteFile(filepath.Join(root, "tmp/omnisat.deb"), debBytes, 0o644)
	in := func(args ...string) string { // a command inside the scratch system
		t.Helper()
		return output(t, "chroot", append([]string{root}, args...)...)
	}
	owner := func(p string) string { // "user:group mode" as the scratch system names them
		t.Helper()
		return strings.TrimSpace(in("stat", "-c", "%U:%G %a", p))
	}
	exists := func(p string) bool {
		_, err := os.Lstat(filepath.Join(root, p))
		return err == nil
	}

	in("dpkg", "-i", "/tmp/omnisat.deb") // no --force-depends: Depends is satisfied by the base
	version, _ := versionOnce()
	if got := in("/usr/bin/omnisat", "version"); got != "omnisat "+version+"\n" {
		t.Errorf("installed omnisat version: %q", got)
	}
	// The camera program starts on the libraries Depends brought (OpenCV's loaded at start).
	in("/usr/libexec/omnisat/omnisat-camera", "-h")
	// omnisat finds its simulator program in /usr/libexec/omnisat.
	in("/usr/bin/omnisat", "simulate", "-h")
	if id := in("id", "omnisat"); !strings.Contains(id, "(audio)") || !strings.Contains(id, "(video)") || !strings.Contains(id, "groups=") {
		t.Errorf("omnisat user: %s", id)
	}
	if shell := strings.TrimSpace(in("getent", "passwd", "omnisat")); !strings.HasSuffix(shell, ":/var/lib/omnisat:/usr/sbin/nologin") {
		t.Errorf("omnisat user entry %q: want home /var/lib/omnisat and no login shell", shell)
	}
	for p, want := range map[string]string{"/etc/omnisat/omnisat.yaml": "root:omnisat 640", "/var/lib/omnisat": "omnisat:omnisat 750"} {
		if got := owner(p); got != want {
			t.Errorf("%s: %s; want %s", p, got, want)
		}
	}
	wants := "etc/systemd/system/multi-user.target.wants/omnisat.service"
	if target, err := os.Readlink(filepath.Join(root, wants)); err != nil || target != "/lib/systemd/system/omnisat.service" {
		t.Errorf("the unit is not enabled: %s -> %q %v", wants, target, err)
	}

	// A reinstall (dpkg's upgrade path) keeps the administrator's edit and the modes.
	conf := filepath.Join(root, "etc/omnisat/omnisat.yaml")
	edited := readFile(t, conf) + "# edited by the administrator\n"
	os.WriteFile(conf, []byte(edited), 0o640)
	in("dpkg", "-i", "/tmp/omnisat.deb")
	if readFile(t, conf) != edited {
		t.Error("the reinstall replaced the edited /etc/omnisat/omnisat.yaml")
	}
	if got := owner("/etc/omnisat/omnisat.yaml"); got != "root:omnisat 640" {
		t.Errorf("after the reinstall /etc/omnisat/omnisat.yaml is %s", got)
	}

	// Remove keeps the configuration and masks the unit; purge takes everything but the user.
	in("dpkg", "-r", "omnisat")
	if !exists("etc/omnisat/omnisat.yaml") || exists("usr/bin/omnisat") {
		t.Error("remove: the conffile must stay and the binary go")
	}
	if target, _ := os.Readlink(filepath.Join(root, "etc/systemd/system/omnisat.service")); target != "/dev/null" {
		t.Errorf("remove: the unit is not masked (%q)", target)
	}
	in("dpkg", "--purge", "omnisat")
	for _, p := range []string{"etc/omnisat/omnisat.yaml", "var/lib/omnisat", wants, "etc/systemd/system/omnisat.service"} {
		if exists(p) {
			t.Errorf("purge left %s", p)
		}
	}
	// dpkg-statoverride --list exits 1 when it lists nothing.
	if over, _ := exec.Command("chroot", root, "dpkg-statoverride", "--list").CombinedOutput(); strings.Contains(string(over), "omnisat") {
		t.Errorf("purge left the recorded modes: %s", over)
	}
}
