#!/usr/bin/python3
# scripts/examples/sluice_ctypes.py: libsluice from Python through ctypes, as
# a binding author would start: open a container, tokenize the prompt,
# generate and print the text as it comes, exactly what `sluice run MODEL
# PROMPT -n N --temp T --seed S` prints on stdout. Python 3 stdlib only.
# usage: sluice_ctypes.py MODEL PROMPT [-n N] [--temp T] [--seed S] [--lib PATH]
import argparse
import ctypes
import ctypes.util
import os
import sys

OK = 0
BUFFER_TOO_SMALL = 3


class OpenOptions(ctypes.Structure):
    _fields_ = [('budget', ctypes.c_char_p), ('attach', ctypes.c_char_p), ('context', ctypes.c_uint32),
                ('threads', ctypes.c_uint32), ('chunk', ctypes.c_uint32), ('readers', ctypes.c_uint32),
                ('lookahead', ctypes.c_int32), ('sequences', ctypes.c_uint32), ('sessions', ctypes.c_uint32),
                ('read_timeout', ctypes.c_double), ('verify', ctypes.c_int), ('no_cache', ctypes.c_int),
                ('force', ctypes.c_int)]


class SamplerConfig(ctypes.Structure):
    _fields_ = [('temperature', ctypes.c_float), ('top_k', ctypes.c_int32), ('top_p', ctypes.c_float),
                ('min_p', ctypes.c_float), ('repeat_penalty', ctypes.c_float), ('seed', ctypes.c_int64),
                ('json_schema', ctypes.c_char_p)]


TOKEN_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_size_t)


class SluiceError(RuntimeError):
    pass


class Library:
    """The functions of sluice.h this example calls, with their C types."""

    def __init__(self, path):
        lib = ctypes.CDLL(path)
        handle = ctypes.c_void_p
        signatures = {
            'sluice_last_error': (ctypes.c_char_p, [handle]),
            'sluice_open_options_init': (None, [ctypes.POINTER(OpenOptions)]),
            'sluice_model_open': (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(OpenOptions),
                                                 ctypes.POINTER(handle)]),
            'sluice_model_close': (ctypes.c_int, [handle]),
            'sluice_tokenize': (ctypes.c_int, [handle, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                               ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                               ctypes.POINTER(ctypes.c_size_t)]),
            'sluice_sampler_config_init': (None, [ctypes.POINTER(SamplerConfig)]),
            'sluice_sampler_new': (ctypes.c_int, [handle, ctypes.POINTER(SamplerConfig), ctypes.POINTER(handle)]),
            'sluice_sequence_new': (ctypes.c_int, [handle, ctypes.POINTER(handle)]),
            'sluice_generate': (ctypes.c_int, [handle, handle, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                               ctypes.c_uint32, TOKEN_CALLBACK, ctypes.c_void_p]),
        }
        for name, (result, arguments) in signatures.items():
            function = getattr(lib, name)
            function.restype = result
            function.argtypes = arguments
        self.lib = lib

    def check(self, status, handle=None):
        if status != OK:
            raise SluiceError(self.lib.sluice_last_error(handle).decode('utf-8', 'replace'))


def find_library(given):
    if given:
        return given
    return os.environ.get('SLUICE_LIB') or ctypes.util.find_library('sluice') or 'libsluice.so.0'


def generate(lib, model_path, prompt, max_tokens, temperature, seed, out):
    sluice = lib.lib
    options = OpenOptions()
    sluice.sluice_open_options_init(ctypes.byref(options))
    model = ctypes.c_void_p()
    lib.check(sluice.sluice_model_open(model_path.encode(), ctypes.byref(options), ctypes.byref(model)))
    try:
        text = prompt.encode()
        count = ctypes.c_size_t()
        status = sluice.sluice_tokenize(model, text, len(text), 1, None, 0, ctypes.byref(count))
        if status != BUFFER_TOO_SMALL:
            lib.check(status, model)
        ids = (ctypes.c_int32 * count.value)()
        lib.check(sluice.sluice_tokenize(model, text, len(text), 1, ids, count.value, ctypes.byref(count)), model)

        config = SamplerConfig()
        sluice.sluice_sampler_config_init(ctypes.byref(config))
        config.temperature = temperature
        config.seed = seed
        sampler, sequence = ctypes.c_void_p(), ctypes.c_void_p()
        lib.check(sluice.sluice_sampler_new(model, ctypes.byref(config), ctypes.byref(sampler)), model)
        lib.check(sluice.sluice_sequence_new(model, ctypes.byref(sequence)), model)

        @TOKEN_CALLBACK
        def on_token(user_data, token, piece, length):
            out.write(ctypes.string_at(piece, length))
            out.flush()
            return 0

        lib.check(sluice.sluice_generate(sequence, sampler, ids, count.value, max_tokens, on_token, None), sequence)
        out.write(b'\n')
        out.flush()
    finally:
        sluice.sluice_model_close(model)  # closes the sampler and sequence too


def main():
    parser = argparse.ArgumentParser(description='Generate text with libsluice through ctypes.')
    parser.add_argument('model', help='a .sluice container')
    parser.add_argument('prompt')
    parser.add_argument('-n', type=int, default=128, help='tokens to generate (128)')
    parser.add_argument('--temp', type=float, default=0.0, help='temperature; 0 is greedy')
    parser.add_argument('--seed', type=int, default=-1, help='sampler seed; -1 draws one')
    parser.add_argument('--lib', help='libsluice.so to load (default: $SLUICE_LIB, then the linker\'s search)')
    args = parser.parse_args()
    try:
        generate(Library(find_library(args.lib)), args.model, args.prompt, args.n, args.temp, args.seed,
                 sys.stdout.buffer)
    except (OSError, SluiceError) as e:
        print('sluice_ctypes.py: %s' % e, file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
