package audio

/*
#cgo pkg-config: alsa
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <alsa/asoundlib.h>

// omnisatRefers reports whether a string anywhere in node names the PCM id: the string is the
// id, or the id with arguments ("id:CARD=1"), either also as a path ("pcm.id", as @func refer
// names it). A type is not a reference (pcm.pulse and ctl.pulse are both of type pulse).
static int omnisatRefers(snd_config_t *node, const char *id) {
	size_t n = strlen(id);
	const char *s;
	snd_config_iterator_t i, next;
	switch (snd_config_get_type(node)) {
	case SND_CONFIG_TYPE_STRING:
		if (snd_config_get_string(node, &s) < 0 || !s)
			return 0;
		if (strncmp(s, "pcm.", 4) == 0)
			s += 4;
		return strncmp(s, id, n) == 0 && (s[n] == '\0' || s[n] == ':');
	case SND_CONFIG_TYPE_COMPOUND:
		snd_config_for_each(i, next, node) {
			snd_config_t *child = snd_config_iterator_entry(i);
			if (snd_config_get_id(child, &s) == 0 && s && strcmp(s, "type") == 0)
				continue;
			if (omnisatRefers(child, id))
				return 1;
		}
		return 0;
	default:
		return 0;
	}
}

// omnisatLoadsLibrary reports whether opening the PCM definition loads a library of its own: a
// type that libasound does not build in (pulse, jack, a52, upmix, the user's own plugins), or
// a built-in rate plugin with a converter named (lavrate, samplerate, speexrate). The
// built-in ones (hw, plug, dmix, ...) are what the cards' own definitions are made of; they
// are always kept.
static int omnisatLoadsLibrary(snd_config_t *def) {
	static const char *builtIn[] = {"adpcm", "alaw", "asym", "copy", "dmix", "dshare", "dsnoop",
		"empty", "file", "hooks", "hw", "iec958", "lfloat", "linear", "meter", "mmap_emul",
		"mulaw", "multi", "null", "plug", "rate", "route", "share", "shm", "softvol", NULL};
	snd_config_t *t;
	const char *type;
	if (snd_config_get_type(def) != SND_CONFIG_TYPE_COMPOUND)
		return 0; // an alias of another definition
	if (snd_config_search(def, "type", &t) < 0 || snd_config_get_string(t, &type) < 0 ||
			type[0] == '$')
		return 0; // not a plain type: leave it alone
	for (int i = 0; builtIn[i]; i++) {
		if (strcmp(type, builtIn[i]) == 0)
			return strcmp(type, "rate") == 0 && snd_config_search(def, "converter", &t) == 0;
	}
	return 1;
}

// omnisatNamed reports whether a device string could select the PCM id: the id contains it,
// ignoring case (the rule of Select for a plugin device, whose name is its id).
static int omnisatNamed(const char *id, char **names, int count) {
	for (int i = 0; i < count; i++) {
		if (strcasestr(id, names[i]))
			return 1;
	}
	return 0;
}

// omnisatProbeOnly loads ALSA's configuration and removes from it, in memory, the PCM
// definitions that load a library of their own, that none of names can select and that no
// kept definition refers to, so that Pa_Initialize, which opens every PCM the configuration
// defines, does not open them. Kept: every built-in definition, "default", every id one of
// names is part of, and what those refer to, transitively. Returns
// how many were removed, or a negative ALSA error code. The files are not touched: the next
// snd_config_update after snd_config_update_free_global reads them whole again.
static int omnisatProbeOnly(char **names, int count) {
	int err = snd_config_update();
	if (err < 0)
		return err;
	snd_config_t *pcms;
	if (snd_config_search(snd_config, "pcm", &pcms) < 0 ||
			snd_config_get_type(pcms) != SND_CONFIG_TYPE_COMPOUND)
		return 0;
	int total = 0;
	snd_config_iterator_t i, next;
	snd_config_for_each(i, next, pcms) total++;
	if (total == 0)
		return 0;
	snd_config_t **entry = calloc(total, sizeof *entry);
	const char **id = calloc(total, sizeof *id);
	char *keep = calloc(total, 1);
	if (!entry || !id || !keep) {
		free(entry); free(id); free(keep);
		return -ENOMEM;
	}
	int k = 0;
	snd_config_for_each(i, next, pcms) {
		entry[k] = snd_config_iterator_entry(i);
		if (snd_config_get_id(entry[k], &id[k]) < 0 || !id[k] || id[k][0] == '@' ||
				!omnisatLoadsLibrary(entry[k]) || strcmp(id[k], "default") == 0 ||
				omnisatNamed(id[k], names, count))
			keep[k] = 1;
		k++;
	}
	for (int changed = 1; changed;) {
		changed = 0;
		for (int a = 0; a < total; a++) {
			if (keep[a])
				continue;
			for (int b = 0; b < total; b++) {
				if (keep[b] && omnisatRefers(entry[b], id[a])) {
					keep[a] = 1;
					changed = 1;
					break;
				}
			}
		}
	}
	int removed = 0;
	for (int a = 0; a < total; a++) {
		if (!keep[a] && snd_config_delete(entry[a]) == 0)
			removed++;
	}
	free(entry); free(id); free(keep);
	return removed;
}
*/
import "C"

import (
	"fmt"
	"slices"
	"strings"
	"unsafe"
)

// probeOnly narrows PortAudio's next initialisation to the ALSA devices names can select.
//
// Pa_Initialize opens every PCM ALSA's configuration defines to learn its channels and rates.
// With Debian's ALSA plugins package installed that is pulse, jack, a52 (libavcodec and ~90
// libraries behind it), upmix, vdownmix, speex and the rate converters, and some of their
// libraries stay mapped after the configuration is freed (libstdc++, glib, x265): private
// memory and start-up CPU for devices the service never opens. The sound cards (hw:N,M) and
// every definition built into libasound (hw, plug, dmix, ..., what the cards' own definitions
// are made of) are probed as always; left out are the definitions that load a library of
// their own, that no name is part of and that no kept definition uses. Select gives the same
// device for each of names either way: it picks among the devices a name is part of, and
// those are all kept.
//
// It returns how many definitions were left out. Called under pa.mu, right before
// Pa_Initialize, with no stream open.
func probeOnly(names []string) (int, error) {
	cnames := make([]*C.char, len(names))
	for i, n := range names {
		cnames[i] = C.CString(n)
	}
	defer func() {
		for _, c := range cnames {
			C.free(unsafe.Pointer(c))
		}
	}()
	var p **C.char
	if len(cnames) > 0 {
		// The array is Go memory holding C pointers only: cgo allows passing it.
		p = &cnames[0]
	}
	r := int(C.omnisatProbeOnly(p, C.int(len(cnames))))
	if r < 0 {
		return 0, fmt.Errorf("read ALSA's configuration: %s", C.GoString(C.snd_strerror(C.int(r))))
	}
	return r, nil
}

// probeNames is the set of names to narrow the probe to for the device strings a process
// opens, and false when every device must be probed: nothing declared, or a device chosen by
// its index (which counts every device).
func probeNames(devices []string) ([]string, bool) {
	if len(devices) == 0 {
		return nil, false
	}
	var names []string
	for _, d := range devices {
		d = strings.TrimSpace(d)
		switch {
		case d == "" || strings.EqualFold(d, "default") || strings.EqualFold(d, "auto"):
			continue // the default device is always kept
		case isNumber(d):
			return nil, false
		}
		names = append(names, strings.ToLower(d))
	}
	return names, true
}

// probeLeftOut reports whether spec may select a device that the current initialisation's
// probe left out: the probe was narrowed, and not for spec (a name it kept no devices for, or
// an index, which counts every device). Called under pa.mu.
func probeLeftOut(spec string) bool {
	if !pa.narrowed {
		return false
	}
	names, byName := probeNames([]string{spec})
	if !byName {
		return true
	}
	for _, n := range names {
		if !slices.Contains(pa.narrowedTo, n) {
			return true
		}
	}
	return false
}
