// The host APIs PortAudio may use: ALSA only.
//
// omnisat links PortAudio's static archive, and this table replaces the one in its
// pa_unix_hostapis.o, which names ALSA, JACK and OSS. With this object defining the table the
// linker never takes that member from the archive, so neither pa_jack.o nor libjack (and, through
// it, libstdc++ and Berkeley DB: 3.3 MB of pages no other process on a satellite shares) is
// linked or loaded. A JACK or PipeWire server is still reached through ALSA's own plugins.

struct PaUtilHostApiRepresentation;
typedef int PaUtilHostApiInitializer(struct PaUtilHostApiRepresentation **, int);

extern int PaAlsa_Initialize(struct PaUtilHostApiRepresentation **hostApi, int hostApiIndex);

PaUtilHostApiInitializer *paHostApiInitializers[] = {PaAlsa_Initialize, 0};

// PortAudio 19.7 reads the default host API's index from here; 19.6 does not know it. Weak, so
// a PortAudio that defines it elsewhere links too.
__attribute__((weak)) int paDefaultHostApiIndex = 0;
