import os
import re

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load
from conan.tools.layout import basic_layout
from conan.tools.scm import Version

required_conan_version = ">=2.0.9"


class StrataConan(ConanFile):
    name = "strata"
    description = ("tf.distribute's distribution strategies for C++ trainers: Mirrored, "
                   "MultiWorkerMirrored, CentralStorage, ParameterServer and OneDevice as "
                   "compile-time types over TCP, NCCL or in-process collectives")
    license = "Apache-2.0"
    url = "https://github.com/conan-io/conan-center-index"
    topics = ("distributed-training", "all-reduce", "parameter-server", "collectives", "nccl",
              "header-only")
    # Header-only; the CUDA option adds strata's kernels, compiled once by nvcc, as a static
    # library (configure() changes the package type, package_id() keeps the options).
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {"cuda": [True, False], "nccl": [True, False]}
    default_options = {"cuda": False, "nccl": False}
    exports_sources = "include/*", "LICENSE", "CMakeLists.txt", "cmake/*"
    no_copy_source = True

    @property
    def _min_compilers(self):
        return {"gcc": "11", "clang": "14", "apple-clang": "15", "msvc": "193"}

    def set_version(self):
        # The version is written once, in include/strata/config.hpp.
        config = load(self, os.path.join(self.recipe_folder, "include", "strata", "config.hpp"))
        parts = []
        for part in ("MAJOR", "MINOR", "PATCH"):
            found = re.search(rf"#define STRATA_VERSION_{part} +(\d+)", config)
            if not found:
                raise ConanInvalidConfiguration(f"STRATA_VERSION_{part} not in config.hpp")
            parts.append(found.group(1))
        self.version = ".".join(parts)

    def configure(self):
        if self.options.cuda:
            self.package_type = "static-library"

    def layout(self):
        if self.options.cuda:
            cmake_layout(self, src_folder=".")
        else:
            basic_layout(self, src_folder=".")

    def requirements(self):
        # Public headers include all four: consumers compile against them.
        self.requires("asio/[>=1.22 <2]", transitive_headers=True)
        self.requires("fmt/[>=9 <13]", transitive_headers=True, transitive_libs=True)
        self.requires("nlohmann_json/[>=3.10 <4]", transitive_headers=True)
        self.requires("openssl/[>=1.1 <4]", transitive_headers=True, transitive_libs=True)

    def package_id(self):
        if not self.info.options.cuda:
            self.info.clear()

    def validate(self):
        check_min_cppstd(self, 20)
        minimum = self._min_compilers.get(str(self.settings.compiler))
        if minimum and Version(self.settings.compiler.version) < minimum:
            raise ConanInvalidConfiguration(
                f"{self.ref} needs C++20 concepts and std::span: {self.settings.compiler} "
                f"{minimum} or newer")
        if self.options.nccl and not self.options.cuda:
            raise ConanInvalidConfiguration(
                f"{self.ref}: nccl=True needs cuda=True (NCCL moves device memory through the "
                "CUDA runtime)")
        if self.options.cuda and self.settings.os != "Linux":
            raise ConanInvalidConfiguration(f"{self.ref}: cuda=True is supported on Linux only")

    def generate(self):
        if not self.options.cuda:
            return
        toolchain = CMakeToolchain(self)
        # The toolchain's CMAKE_CXX_STANDARD would reach CMake's CUDA checks, and CMake 3.25
        # knows no C++20 dialect for nvcc 13; strata asks for C++20 itself (compile features,
        # and -std=c++20 to nvcc).
        toolchain.blocks.remove("cppstd")
        toolchain.cache_variables.update({
            "STRATA_BUILD_TESTS": False,
            "STRATA_BUILD_BENCHMARKS": False,
            "STRATA_BUILD_EXAMPLES": False,
            "STRATA_BUILD_TOOLS": False,
            "STRATA_INSTALL": True,
            "STRATA_ENABLE_CUDA": True,
            "STRATA_ENABLE_NCCL": bool(self.options.nccl),
        })
        toolchain.generate()
        CMakeDeps(self).generate()

    def build(self):
        if self.options.cuda:
            cmake = CMake(self)
            cmake.configure()
            cmake.build(target="strata_cuda")

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        copy(self, "*", os.path.join(self.source_folder, "include"),
             os.path.join(self.package_folder, "include"))
        if self.options.cuda:
            copy(self, "libstrata_cuda.a", self.build_folder,
                 os.path.join(self.package_folder, "lib"), keep_path=False)

    def _link_dependencies(self, component):
        # (package, its target, the library the linker needs when the system provides it)
        dependencies = [("asio", "asio::asio", None), ("fmt", "fmt::fmt", "fmt"),
                        ("nlohmann_json", "nlohmann_json::nlohmann_json", None),
                        ("openssl", "openssl::crypto", "crypto")]
        for name, target, system_library in dependencies:
            if name in self.dependencies.host:
                component.requires.append(target)
            elif system_library:
                # Declared in the profile's [platform_requires]: no package to point at, the
                # system's copy serves, found by the compiler's and linker's own paths.
                component.system_libs.append(system_library)

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "strata")

        core = self.cpp_info.components["core"]
        core.set_property("cmake_target_name", "strata::strata")
        core.set_property("pkg_config_name", "strata")
        core.bindirs = []
        core.libdirs = []
        self._link_dependencies(core)
        if self.settings.os in ("Linux", "FreeBSD"):
            core.system_libs.append("pthread")

        # The GPU path: the CUDA toolkit and NCCL come from the system (no Conan packages);
        # their library directory must be on the linker's path.
        if self.options.cuda:
            cuda = self.cpp_info.components["cuda"]
            cuda.set_property("cmake_target_name", "strata::cuda")
            cuda.libs = ["strata_cuda"]
            cuda.defines = ["STRATA_HAS_CUDA=1"]
            cuda.system_libs = ["cudart"]
            cuda.requires = ["core"]
        if self.options.nccl:
            nccl = self.cpp_info.components["nccl"]
            nccl.set_property("cmake_target_name", "strata::nccl")
            nccl.defines = ["STRATA_HAS_NCCL=1"]
            nccl.system_libs = ["nccl"]
            nccl.requires = ["cuda"]
            nccl.bindirs = []
            nccl.libdirs = []
